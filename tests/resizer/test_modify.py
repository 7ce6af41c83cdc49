"""VolumeAttributesClass changes end to end: ControllerModifyVolume and what it writes.

We test these aspects:
- a Bound claim naming a class: the driver gets the class's parameters as mutable
  parameters; the PV gets `spec.volumeAttributesClassName`; the claim's
  `currentVolumeAttributesClassName` is set and `modifyVolumeStatus` and the modify
  conditions are gone; the events VolumeModify and VolumeModifySuccessful;
- a class the driver rejects (INVALID_ARGUMENT): Infeasible with the target, the
  ModifyVolumeError condition, VolumeModifyFailed; picking another class recovers;
- a non-final error: InProgress, "Still modifying to VAC", retried to success;
- a class that does not exist: Pending and `VAC "..." does not exist.`, done once it exists.
"""

from __future__ import annotations

from typing import Any

from kopf_csi import names
from kopf_csi.csi import Code
from kopf_csi.driver import Driver
from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.operator import OperatorThread

from ..conftest import DRIVER_NAME
from ..provisioner.conftest import wait_until
from .conftest import NAMESPACE, bound_claim, conditions_of, messages, pv_of, status_of


def make_class(cluster: EmulatedCluster, name: str, **parameters: str) -> None:
    cluster.create(
        "volumeattributesclasses",
        {"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttributesClass",
         "metadata": {"name": name}, "driverName": DRIVER_NAME, "parameters": parameters},
    )  # fmt: skip


def pick(cluster: EmulatedCluster, vac: str) -> Any:
    patch = {"spec": {"volumeAttributesClassName": vac}}
    return cluster.patch("persistentvolumeclaims", NAMESPACE, "data", patch)


def modify_status(cluster: EmulatedCluster) -> Any:
    return status_of(cluster).get("modifyVolumeStatus")


async def test_a_new_class_modifies_the_volume(
    cluster: EmulatedCluster, driver: Driver, operator: OperatorThread
) -> None:
    make_class(cluster, "gold", iops="300")
    claim, pv = await bound_claim(cluster, operator)
    pick(cluster, "gold")
    await wait_until(lambda: status_of(cluster).get("currentVolumeAttributesClassName") == "gold")
    assert modify_status(cluster) is None
    assert not conditions_of(cluster)
    assert pv_of(cluster, pv["metadata"]["name"])["spec"]["volumeAttributesClassName"] == "gold"
    handle = pv["spec"]["csi"]["volumeHandle"]
    assert driver.state.volumes[handle].mutable_parameters == {"iops": "300"}
    await wait_until(lambda: messages(cluster, claim, "VolumeModifySuccessful"))
    assert messages(cluster, claim, "VolumeModify") == [
        "external resizer is modifying volume data with vac gold"
    ]
    assert messages(cluster, claim, "VolumeModifySuccessful") == [
        "external resizer modified volume data with vac gold successfully"
    ]
    assert not cluster.dropped  # nothing written that a real API server would drop


async def test_an_infeasible_class_is_marked_and_another_class_recovers(
    cluster: EmulatedCluster, driver: Driver, operator: OperatorThread
) -> None:
    make_class(cluster, "bad", colour="blue")  # not a mutable parameter of the driver
    make_class(cluster, "good", throughput="10")
    claim, pv = await bound_claim(cluster, operator)
    pick(cluster, "bad")
    await wait_until(lambda: (modify_status(cluster) or {}).get("status") == "Infeasible")
    assert modify_status(cluster)["targetVolumeAttributesClassName"] == "bad"
    error = conditions_of(cluster)[names.CONDITION_MODIFY_VOLUME_ERROR]
    assert error["message"].startswith(
        "ModifyVolume failed with error: rpc error: code = InvalidArgument desc = "
    )
    assert error["message"].endswith(". Waiting for retry.")
    await wait_until(lambda: messages(cluster, claim, "VolumeModifyFailed"))

    pick(cluster, "good")
    await wait_until(lambda: status_of(cluster).get("currentVolumeAttributesClassName") == "good")
    assert modify_status(cluster) is None
    assert not conditions_of(cluster)
    assert driver.state.volumes[pv["spec"]["csi"]["volumeHandle"]].mutable_parameters == {
        "throughput": "10"
    }


async def test_a_non_final_error_keeps_modifying_to_the_same_class(
    cluster: EmulatedCluster, driver: Driver, operator: OperatorThread
) -> None:
    make_class(cluster, "gold", iops="300")
    claim, _ = await bound_claim(cluster, operator)
    driver.faults.fail("ControllerModifyVolume", Code.UNAVAILABLE, times=1, message="later")
    pick(cluster, "gold")
    expected = "rpc error: code = Unavailable desc = later. Still modifying to VAC gold"
    await wait_until(lambda: expected in messages(cluster, claim, "VolumeModifyFailed"))
    await wait_until(lambda: status_of(cluster).get("currentVolumeAttributesClassName") == "gold")


async def test_a_missing_class_is_pending_until_it_exists(
    cluster: EmulatedCluster, driver: Driver, operator: OperatorThread
) -> None:
    claim, _ = await bound_claim(cluster, operator)
    pick(cluster, "later")
    await wait_until(lambda: (modify_status(cluster) or {}).get("status") == "Pending")
    await wait_until(lambda: messages(cluster, claim, "VolumeModifyFailed"))
    assert messages(cluster, claim, "VolumeModifyFailed")[0] == 'VAC "later" does not exist.'
    make_class(cluster, "later", iops="5")
    await wait_until(
        lambda: status_of(cluster).get("currentVolumeAttributesClassName") == "later", timeout=5
    )
