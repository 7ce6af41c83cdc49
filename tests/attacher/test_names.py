"""The attacher's and the health monitor's compatibility strings, pinned to the Go bytes.

We test these aspects:
- each constant has exactly the value external-attacher / external-health-monitor use;
- together with the provisioner's pins, every string constant in `kopf_csi.names` is pinned;
- the templates render as the Go `fmt.Sprintf`/`errors.NewNotFound` texts do;
- the finalizer of a driver name is exactly upstream's, including the trailing-dash `X`.
"""

from __future__ import annotations

import pytest

from kopf_csi import names
from kopf_csi.attaching.decisions import finalizer_name

PINNED = {
    "FINALIZER_ATTACHER_PREFIX": "external-attacher/",
    "ANN_VA_NODE_ID": "csi.alpha.kubernetes.io/node-id",
    "MESSAGE_PV_DELETING": 'PersistentVolume "{volume}" is marked for deletion',
    "MESSAGE_PV_FINALIZER_FAILED": "could not add PersistentVolume finalizer: {error}",
    "MESSAGE_VA_SAVE_FAILED": "could not save VolumeAttachment: {error}",
    "MESSAGE_SECRET_LOAD_FAILED": 'failed to load secret "{namespace}/{name}": {error}',
    "MESSAGE_CSINODE_WITHOUT_DRIVER": "CSINode {node} does not contain driver {driver}",
    "MESSAGE_PV_NOT_FOUND": 'persistentvolume "{volume}" not found',
    "MESSAGE_CSINODE_NOT_FOUND": 'csinode.storage.k8s.io "{node}" not found',
    "MESSAGE_SECRET_NOT_FOUND": 'secrets "{name}" not found',
    "MESSAGE_NON_CSI_SOURCE": "pv spec contained non-csi source that was not migrated",
    "MESSAGE_BOTH_SOURCES": (
        "both InlineCSIVolumeSource and PersistentVolumeName specified in VA source"
    ),
    "MESSAGE_NO_SOURCE": (
        "neither InlineCSIVolumeSource nor PersistentVolumeName specified in VA source"
    ),
    "MESSAGE_INLINE_WITHOUT_CSI": "inline volume spec contains nil CSI source",
    "HEALTH_EVENT_COMPONENT": "csi-pv-monitor-controller-{driver}",
    "REASON_VOLUME_CONDITION_ABNORMAL": "VolumeConditionAbnormal",
    "REASON_VOLUME_CONDITION_NORMAL": "VolumeConditionNormal",
    "MESSAGE_VOLUME_RECOVERED": "The Volume returns to the healthy state",
}


@pytest.mark.parametrize(
    ("name", "value"), sorted(PINNED.items()), ids=[f"{n} -> exact bytes" for n in sorted(PINNED)]
)
def test_constant_is_byte_identical(name: str, value: str) -> None:
    assert getattr(names, name) == value


@pytest.mark.parametrize(
    ("template", "fields", "expected"),
    [
        (names.MESSAGE_PV_DELETING, {"volume": "pv-1"},
         'PersistentVolume "pv-1" is marked for deletion'),
        (names.MESSAGE_SECRET_LOAD_FAILED, {"namespace": "ns", "name": "s", "error": "boom"},
         'failed to load secret "ns/s": boom'),
        (names.MESSAGE_CSINODE_WITHOUT_DRIVER, {"node": "n1", "driver": "d.example.com"},
         "CSINode n1 does not contain driver d.example.com"),
        (names.MESSAGE_CSINODE_NOT_FOUND, {"node": "n1"},
         'csinode.storage.k8s.io "n1" not found'),
        (names.HEALTH_EVENT_COMPONENT, {"driver": "hostpath.csi.k8s.io"},
         "csi-pv-monitor-controller-hostpath.csi.k8s.io"),
    ],
)  # fmt: skip
def test_templates_render_like_go(template: str, fields: dict[str, str], expected: str) -> None:
    assert template.format(**fields) == expected


@pytest.mark.parametrize(
    ("driver", "finalizer"),
    [
        ("hostpath.csi.k8s.io", "external-attacher/hostpath-csi-k8s-io"),
        ("pd.csi.storage.gke.io", "external-attacher/pd-csi-storage-gke-io"),
        ("ebs.csi.aws.com", "external-attacher/ebs-csi-aws-com"),
        ("driver_with/odd:chars", "external-attacher/driver-with-odd-chars"),
        ("ends.with.dot.", "external-attacher/ends-with-dot-X"),
        ("ends-with-dash-", "external-attacher/ends-with-dash-X"),
        ("UPPER.Case-9", "external-attacher/UPPER-Case-9"),
    ],
)
def test_the_finalizer_is_upstreams(driver: str, finalizer: str) -> None:
    assert finalizer_name(driver) == finalizer
