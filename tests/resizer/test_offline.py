"""An offline-only driver ("volume in use") end to end, without watching pods.

We test these aspects:
- the driver says FAILED_PRECONDITION while the volume is published: VolumeResizeFailed with
  the Go text, and while a VolumeAttachment (or a pod) still uses the volume no new RPC is sent,
  only the "only supports offline expansion and volume is currently in-use" warning;
- once the pod is gone (the KCM stand-in deletes the VA, the attacher detaches), the claim is
  expanded at once, on the VA's change, not on a pod watch;
- the operator never watches pods (no pod handler is registered).
"""

from __future__ import annotations

import pytest

from kopf_csi import names
from kopf_csi.driver import Driver
from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.operator import OperatorThread
from kopf_csi.testing.spies import Calls

from ..conftest import DRIVER_NAME
from ..provisioner.conftest import make_pod, wait_until
from .conftest import NAMESPACE, bound_claim, grow, messages, resize_status

OFFLINE = {"features": {"online_expansion": False}}


@pytest.mark.parametrize("driver_options", [OFFLINE], indirect=True)
async def test_an_offline_driver_waits_until_the_volume_is_unused(
    cluster: EmulatedCluster, driver: Driver, operator: OperatorThread, calls: Calls
) -> None:
    claim, pv = await bound_claim(cluster, operator)
    handle = pv["spec"]["csi"]["volumeHandle"]
    make_pod(cluster, "app", "data")
    await wait_until(lambda: driver.state.volumes[handle].attachments)  # attached to the node
    grow(cluster, "data", "2Mi")

    in_use = names.MESSAGE_OFFLINE_IN_USE.format(claim=f"{NAMESPACE}/data", driver=DRIVER_NAME)
    await wait_until(lambda: in_use in messages(cluster, claim, "VolumeResizeFailed"))
    failures = messages(cluster, claim, "VolumeResizeFailed")
    assert any("rpc error: code = FailedPrecondition" in m for m in failures)
    calls_while_in_use = calls.count("ControllerExpandVolume")
    assert calls_while_in_use == 1
    assert resize_status(cluster) == names.RESIZE_CONTROLLER_IN_PROGRESS

    cluster.delete("pods", NAMESPACE, "app")
    await wait_until(lambda: resize_status(cluster) == names.RESIZE_NODE_PENDING, timeout=5.0)
    assert calls.count("ControllerExpandVolume") == 2
    assert driver.state.volumes[handle].size == 2 * 1024 * 1024


@pytest.mark.parametrize("driver_options", [OFFLINE], indirect=True)
async def test_no_pod_is_ever_watched(cluster: EmulatedCluster, operator: OperatorThread) -> None:
    watched = {
        handler.selector.plural if hasattr(handler.selector, "plural") else str(handler.selector)
        for handler in operator.registry._watching.get_all_handlers()
    }
    assert watched
    assert not any("pods" in str(w) for w in watched)
