"""An operator run without `--leader-election` (the Go sidecars' default) takes no Lease: explain
must not read a free or absent Lease as "no operator serves the class".

The case from a real cluster: one claim of a burst stays Pending while the operator works on
another (one worker, held by a CreateVolume that does not answer), so the claim has no event of
its own; the provisioner's Lease is absent, or left free by an earlier run with leader election.
The provisioner's newest event on the other claim is what shows the operator.
"""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

import pytest

from kopf_csi.driver import Driver
from kopf_csi.settings import CSISettings, LeaderElectionSettings, Settings, WorkerSettings
from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.operator import OperatorThread

from ..conftest import DRIVER_NAME, until
from ..provisioner.conftest import make_claim, make_storage_class
from .conftest import LEASE_NAMESPACE, until_explained

CSI_TIMEOUT = 60.0
"""Long enough that the held CreateVolume keeps the one worker busy while explain looks."""
LEASE = DRIVER_NAME.replace(".", "-")


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """No leader election, one provisioning worker, a long CSI timeout."""
    csi = CSISettings(address=settings.csi.address, timeout=CSI_TIMEOUT, connect_timeout=10.0)
    return dataclasses.replace(
        settings,
        csi=csi,
        workers=WorkerSettings(provisioner=1),
        leader_election=LeaderElectionSettings(enabled=False),
    )


def _released_lease(cluster: EmulatedCluster) -> None:
    """The provisioner's Lease as an earlier run with --leader-election left it: released."""
    five_minutes_ago = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)
    stamp = five_minutes_ago.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    cluster.create(
        "leases",
        {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
         "metadata": {"name": LEASE, "namespace": LEASE_NAMESPACE},
         "spec": {"holderIdentity": "", "leaseDurationSeconds": 15, "acquireTime": stamp,
                  "renewTime": stamp, "leaseTransitions": 1}},
    )  # fmt: skip


@pytest.mark.parametrize("lease", ["absent", "released"])
async def test_a_claim_queued_in_an_operator_without_leader_election(
    cluster: EmulatedCluster,
    kcm: Any,
    operator: OperatorThread,
    driver: Driver,
    explain: Any,
    operator_url: str,
    lease: str,
) -> None:
    if lease == "released":
        _released_lease(cluster)
    driver.faults.hang("CreateVolume", times=1)  # the first claim's, for CSI_TIMEOUT
    await make_storage_class(cluster, operator)
    make_claim(cluster, "first")
    await until(
        lambda: [
            event for event in cluster.objects("events")
            if event.get("reason") == "Provisioning"
            and event["involvedObject"].get("name") == "first"
        ]
    )  # fmt: skip
    make_claim(cluster, "c0047")  # queued behind "first": no event of its own

    found = await until_explained(explain, "pvc/default/c0047", "provisioning")
    output = found.text.stdout + " ".join(found.json["evidence"] + found.json["next"])
    assert "no operator serves" not in output, output
    assert "no running operator" not in output, output
    assert found.text.first_line == (
        f"WAITING: persistentvolumeclaim/default/c0047: waiting for {DRIVER_NAME} to provision"
        " the volume: its provisioner has posted no event about this claim yet"
    )
    assert found.text.code == 1
    assert found.json["state"] == "progressing"
    evidence = found.text.evidence
    # The Lease's state, as read.
    if lease == "released":
        assert f"Lease {LEASE_NAMESPACE}/{LEASE}: held by nobody (released 5m ago)" in evidence
        after = "is newer than the Lease's last renewal"
    else:
        assert f"Lease {LEASE}: none in any namespace" in evidence
        after = ", and no Lease"
    # The provisioner's last work, and what it shows: an operator without leader election.
    (activity,) = [line for line in evidence if line.startswith("event Provisioning")]
    assert activity.startswith("event Provisioning on claim default/first ("), activity
    assert after in activity, activity
    assert activity.endswith(f": an operator serves {DRIVER_NAME} without leader election")
    # What to do: ask the operator, which knows whether it has seen the claim.
    assert found.json["next"][0].startswith(
        "ask the operator where the claim stands: kopf-csi explain"
        " persistentvolumeclaim/default/c0047 --operator http://POD-IP:PORT"
    ), found.json["next"]

    # Asked, the operator says where the claim is: its turn has not come.
    asked = await until_explained(
        explain, "pvc/default/c0047", "queued", "--operator", operator_url
    )
    assert asked.json["summary"] == (
        "waiting its turn in the operator's claims queue: 1 of 1 queued:"
        " all 1 of its workers are busy"
    )
    assert f"operator: serves {DRIVER_NAME}" in asked.text.evidence
