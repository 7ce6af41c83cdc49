"""Leader election's compatibility strings: the Go sidecars' Lease names, pinned to the byte.

We test these aspects:
- each prefix and event string has the value of the Go code (the cmd/ of each sidecar,
  csi-lib-utils leaderelection, client-go's LeaseLock);
- `sanitize_lease_name` is csi-lib-utils' `sanitizeName` (including the trailing `X`);
- the full Lease name of each role for real driver names, as seen in clusters.
"""

from __future__ import annotations

import pytest

from kopf_csi import names
from kopf_csi.leadership import Role

PINNED = {
    "LEASE_PREFIX_PROVISIONER": "",
    "LEASE_PREFIX_ATTACHER": "external-attacher-leader-",
    "LEASE_PREFIX_RESIZER": "external-resizer-",
    "LEASE_PREFIX_SNAPSHOTTER": "external-snapshotter-leader-",
    "LEASE_PREFIX_HEALTH_MONITOR": "external-health-monitor-leader-",
    "LEASE_EVENT_REASON": "LeaderElection",
    "LEASE_EVENT_BECAME_LEADER": "{identity} became leader",
    "LEASE_EVENT_STOPPED_LEADING": "{identity} stopped leading",
    "LEASE_EVENT_COMPONENT": "{lease}/{identity}",
}


@pytest.mark.parametrize(("name", "value"), sorted(PINNED.items()))
def test_constant_is_pinned(name: str, value: str) -> None:
    assert getattr(names, name) == value


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        pytest.param("hostpath.csi.k8s.io", "hostpath-csi-k8s-io", id="dots"),
        pytest.param("example.com/csi", "example-com-csi", id="slash"),
        pytest.param("Driver_Name", "Driver-Name", id="underscore-and-case-kept"),
        pytest.param("ends-with.", "ends-with-X", id="trailing-dash-gets-x"),
        pytest.param("ünïcode", "-n-code", id="one-dash-per-non-ascii-char"),
        pytest.param("plain-name-1", "plain-name-1", id="unchanged"),
    ],
)
def test_sanitize_is_csi_lib_utils_sanitize_name(given: str, expected: str) -> None:
    assert names.sanitize_lease_name(given) == expected


@pytest.mark.parametrize(
    ("role", "driver", "expected"),
    [
        (Role.PROVISIONER, "hostpath.csi.k8s.io", "hostpath-csi-k8s-io"),
        (Role.ATTACHER, "hostpath.csi.k8s.io", "external-attacher-leader-hostpath-csi-k8s-io"),
        (Role.RESIZER, "hostpath.csi.k8s.io", "external-resizer-hostpath-csi-k8s-io"),
        (
            Role.SNAPSHOTTER,
            "openshift-storage.rbd.csi.ceph.com",
            "external-snapshotter-leader-openshift-storage-rbd-csi-ceph-com",
        ),
        (
            Role.HEALTH_MONITOR,
            "hostpath.csi.k8s.io",
            "external-health-monitor-leader-hostpath-csi-k8s-io",
        ),
        (Role.PROVISIONER, "vendor.io/block", "vendor-io-block"),
    ],
)
def test_lease_name_of_each_role(role: Role, driver: str, expected: str) -> None:
    assert role.lease_name(driver) == expected
    assert names.lease_name(role.value, driver) == expected
