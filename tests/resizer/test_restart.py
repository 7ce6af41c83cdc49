"""An operator restart in the middle of a resize, end to end.

We test these aspects:
- the claim is marked ControllerResizeInProgress with `allocatedResources` before the RPC, so
  an operator that stops during ControllerExpandVolume leaves a claim that says so;
- the next operator resumes from the claim's status alone (nothing in memory survives) and
  finishes the expansion at the allocated size.
"""

from __future__ import annotations

from kopf_csi import names
from kopf_csi.driver import Driver
from kopf_csi.settings import Settings
from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.operator import OperatorThread
from kopf_csi.testing.spies import Calls

from ..provisioner.conftest import wait_until
from .conftest import bound_claim, grow, resize_status, status_of


async def test_a_resize_cut_off_by_a_restart_is_finished_by_the_next_operator(
    cluster: EmulatedCluster,
    driver: Driver,
    settings: Settings,
    handler_modules: tuple[str, ...],
    kcm: object,
    calls: Calls,
) -> None:
    first = OperatorThread(settings=settings, modules=handler_modules)
    await first.start()
    try:
        _, pv = await bound_claim(cluster, first, volume_mode="Block")
        driver.faults.hang("ControllerExpandVolume")  # on its way when the operator stops
        grow(cluster, "data", "2Mi")
        await wait_until(lambda: calls.count("ControllerExpandVolume") == 1)
        assert resize_status(cluster) == names.RESIZE_CONTROLLER_IN_PROGRESS
        assert status_of(cluster)["allocatedResources"] == {"storage": "2Mi"}
    finally:
        await first.stop()
    driver.faults.clear()
    assert status_of(cluster)["capacity"]["storage"] == "1Mi"

    second = OperatorThread(settings=settings, modules=handler_modules)
    await second.start()
    try:
        await wait_until(lambda: status_of(cluster)["capacity"]["storage"] == "2Mi")
        assert not status_of(cluster).get("allocatedResourceStatuses")
        handle = pv["spec"]["csi"]["volumeHandle"]
        assert driver.state.volumes[handle].size == 2 * 1024 * 1024
    finally:
        await second.stop()
