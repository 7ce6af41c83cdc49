"""A driver that answers CreateVolume with nonsense: reported, never leaked, never written to a PV.

Everything runs for real (kopf, the emulated API over HTTP, the KCM stand-in, the reference
driver over its socket); the driver's answers are changed after it did the work, with
`driver.faults.respond()`. We test these aspects:

- the response faults themselves: a mutation for the next N answers, then normal answers;
- an empty volume id: a ProvisioningFailed event, no PV, the claim retried with the same name
  (CreateVolume is idempotent: the retry gets the same volume back, with its id): one volume;
- a capacity below the request, or negative: the Go message, the volume deleted, a retry;
- a topology outside the requisite ones: the volume deleted, a retry, never a PV pinned to a
  node the claim cannot use;
- a capacity of zero ("unknown"): the PV gets the requested size (Go's behaviour);
- a cleanup that fails: the event says the volume is orphaned (Go's text), and the claim's
  retries delete it once the driver recovers: the backend never keeps more than one volume;
- throughout, other claims are provisioned normally.
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Callable

import pytest
from grpclib.client import Channel

from kopf_csi import names
from kopf_csi.csi import messages as csi
from kopf_csi.csi._generated.csi import v1 as csi_v1
from kopf_csi.csi.codes import Code
from kopf_csi.driver import Driver
from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.operator import OperatorThread

from ..provisioner.conftest import (
    TOPOLOGY_KEY,
    make_claim,
    make_storage_class,
    wait_for_bound,
    wait_for_event,
)

pytestmark = pytest.mark.usefixtures("kcm")

MiB = 1024 * 1024


def mutate_volume(**changes: object) -> Callable[[csi.CreateVolumeResponse], object]:
    def mutate(response: csi.CreateVolumeResponse) -> csi.CreateVolumeResponse:
        assert response.volume is not None
        volume = dataclasses.replace(response.volume, **changes)  # type: ignore[type-var]
        return csi.CreateVolumeResponse(volume=volume)

    return mutate


async def test_response_faults_change_the_next_answers(
    driver: Driver, socket_path: pathlib.Path
) -> None:
    rule = driver.faults.respond("CreateVolume", mutate_volume(volume_id=""), times=1)
    channel = Channel(path=str(socket_path))
    try:
        stub = csi_v1.ControllerStub(channel)
        mount = csi.VolumeCapability(
            mount=csi.VolumeCapabilityMountVolume(),
            access_mode=csi.VolumeCapabilityAccessMode(
                mode=csi.VolumeCapabilityAccessModeMode.SINGLE_NODE_WRITER
            ),
        )
        request = csi.CreateVolumeRequest(name="v", volume_capabilities=[mount])
        first = await stub.create_volume(request)
        second = await stub.create_volume(request)
    finally:
        channel.close()
    assert first.volume is not None
    assert second.volume is not None
    assert first.volume.volume_id == ""
    assert second.volume.volume_id in driver.state.volumes  # the same volume, now with its id
    assert len(driver.state.volumes) == 1
    assert rule not in driver.faults._responders
    driver.faults.respond("CreateVolume", mutate_volume(capacity_bytes=1))
    driver.faults.clear()
    assert not driver.faults._responders


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        pytest.param({"volume_id": ""}, "created volume has no volume id", id="empty-id"),
        pytest.param(
            {"capacity_bytes": 1024},
            f"created volume capacity 1024 less than requested capacity {MiB}",
            id="capacity-below-request",
        ),
        pytest.param(
            {"capacity_bytes": -1},
            f"created volume capacity -1 less than requested capacity {MiB}",
            id="negative-capacity",
        ),
        pytest.param(
            {"accessible_topology": [csi.Topology(segments={TOPOLOGY_KEY: "node-elsewhere"})]},
            "created volume is accessible from [{" + TOPOLOGY_KEY + "=node-elsewhere}], none of",
            id="foreign-topology",
        ),
    ],
)
async def test_nonsense_is_reported_and_retried_without_a_leak(
    cluster: EmulatedCluster,
    operator: OperatorThread,
    driver: Driver,
    changes: dict[str, object],
    message: str,
) -> None:
    driver.faults.respond("CreateVolume", mutate_volume(**changes), times=2)
    await make_storage_class(cluster, operator)
    claim = make_claim(cluster, "data")
    await wait_for_event(
        cluster, claim, names.REASON_PROVISIONING_FAILED,
        message=lambda text: text.startswith(message),
    )  # fmt: skip
    other = make_claim(cluster, "other")  # the operator keeps serving other claims
    pv = await wait_for_bound(cluster, claim, timeout=15)
    await wait_for_bound(cluster, other, timeout=15)
    assert pv["spec"]["csi"]["volumeHandle"] in driver.state.volumes
    assert pv["spec"]["capacity"]["storage"] == "1Mi"
    assert len(driver.state.volumes) == 2  # the claim's one and the other's: nothing leaked
    node = pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"]
    assert node[0]["values"] != ["node-elsewhere"]


async def test_zero_capacity_means_the_requested_size(
    cluster: EmulatedCluster, operator: OperatorThread, driver: Driver
) -> None:
    driver.faults.respond("CreateVolume", mutate_volume(capacity_bytes=0))
    await make_storage_class(cluster, operator)
    claim = make_claim(cluster, "data", size="3Mi")
    pv = await wait_for_bound(cluster, claim, timeout=15)
    assert pv["spec"]["capacity"]["storage"] == "3Mi"


async def test_a_failed_cleanup_is_reported_as_orphaned_and_finished_later(
    cluster: EmulatedCluster, operator: OperatorThread, driver: Driver
) -> None:
    driver.faults.respond("CreateVolume", mutate_volume(capacity_bytes=1024), times=2)
    driver.faults.fail("DeleteVolume", Code.INTERNAL, times=1, message="backend busy")
    await make_storage_class(cluster, operator)
    claim = make_claim(cluster, "data")
    event = await wait_for_event(
        cluster, claim, names.REASON_PROVISIONING_FAILED,
        message=lambda text: "failed, volume is orphaned" in text,
    )  # fmt: skip
    assert event["message"] == (
        f"created volume capacity 1024 less than requested capacity {MiB}. Cleanup of volume"
        f" pvc-{claim['metadata']['uid']} failed, volume is orphaned: rpc error: code = Internal"
        " desc = backend busy"
    )
    pv = await wait_for_bound(cluster, claim, timeout=15)
    assert list(driver.state.volumes) == [pv["spec"]["csi"]["volumeHandle"]]
