"""Resize failures end to end, through the driver's fault injection and its size limit.

We test these aspects:
- a non-final error (UNAVAILABLE, a timeout): VolumeResizeFailed with the Go text, the claim
  stays ControllerResizeInProgress without an error condition, and the retry expands it;
- a final error (INTERNAL, FAILED_PRECONDITION without attach): the ControllerResizeError
  condition with `failed to expand pvc with <error>`, retried with backoff until it works;
- an infeasible error (OUT_OF_RANGE from the driver's size limit): ControllerResizeInfeasible,
  the error condition, and a slow retry (one call within the fast backoff's window);
- recovery: the user lowers the failed request and the claim expands to the new size;
- the trivial resizer (node-only expansion): no RPC, the PV gets the request, NodeResizePending.
"""

from __future__ import annotations

import pytest

from kopf_csi import names
from kopf_csi.csi import Code
from kopf_csi.driver import Driver, Limits
from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.operator import OperatorThread
from kopf_csi.testing.spies import Calls

from ..conftest import DRIVER_NAME
from ..provisioner.conftest import assert_stays, make_storage_class, wait_until
from .conftest import (
    bound_claim,
    conditions_of,
    grow,
    messages,
    pv_of,
    resize_status,
    status_of,
)

MiB = 1024 * 1024


@pytest.mark.parametrize("code", [Code.UNAVAILABLE, Code.DEADLINE_EXCEEDED, Code.ABORTED])
async def test_a_non_final_error_is_retried_in_progress(
    cluster: EmulatedCluster, driver: Driver, operator: OperatorThread, code: Code
) -> None:
    claim, pv = await bound_claim(cluster, operator, volume_mode="Block")
    volume = pv["metadata"]["name"]
    driver.faults.fail("ControllerExpandVolume", code, times=2, message="busy")
    grow(cluster, "data", "2Mi")
    expected = (
        f'resize volume "{volume}" by resizer "{DRIVER_NAME}" failed: '
        f"rpc error: code = {code.name.title().replace('_', '')} desc = busy"
    )
    await wait_until(lambda: expected in messages(cluster, claim, "VolumeResizeFailed"))
    assert names.CONDITION_CONTROLLER_RESIZE_ERROR not in conditions_of(cluster)
    await wait_until(lambda: status_of(cluster)["capacity"]["storage"] == "2Mi")
    assert not conditions_of(cluster)


@pytest.mark.parametrize("code", [Code.INTERNAL, Code.UNKNOWN, Code.PERMISSION_DENIED])
async def test_a_final_error_sets_the_error_condition_and_retries(
    cluster: EmulatedCluster, driver: Driver, operator: OperatorThread, code: Code
) -> None:
    claim, _ = await bound_claim(cluster, operator, volume_mode="Block")
    driver.faults.fail("ControllerExpandVolume", code, times=1, message="broken")
    grow(cluster, "data", "2Mi")
    await wait_until(lambda: names.CONDITION_CONTROLLER_RESIZE_ERROR in conditions_of(cluster))
    condition = conditions_of(cluster)[names.CONDITION_CONTROLLER_RESIZE_ERROR]
    go_code = {
        "INTERNAL": "Internal",
        "UNKNOWN": "Unknown",
        "PERMISSION_DENIED": "PermissionDenied",
    }
    assert condition["message"] == (
        f"failed to expand pvc with rpc error: code = {go_code[code.name]} desc = broken"
    )
    assert resize_status(cluster) == names.RESIZE_CONTROLLER_IN_PROGRESS
    await wait_until(lambda: status_of(cluster)["capacity"]["storage"] == "2Mi")
    assert not conditions_of(cluster)  # the success clears the error too
    # The event follows the status write (as upstream's markOverallExpansionAsFinished).
    await wait_until(lambda: messages(cluster, claim, "VolumeResizeSuccessful"))
    assert not cluster.dropped  # nothing written that a real API server would drop


@pytest.mark.parametrize(
    "driver_options", [{"limits": Limits(max_volume_size=4 * MiB)}], indirect=True
)
async def test_an_infeasible_request_is_retried_slowly_and_can_be_lowered(
    cluster: EmulatedCluster, driver: Driver, operator: OperatorThread, calls: Calls
) -> None:
    claim, pv = await bound_claim(cluster, operator, volume_mode="Block")
    grow(cluster, "data", "8Mi")
    await wait_until(lambda: resize_status(cluster) == names.RESIZE_CONTROLLER_INFEASIBLE)
    condition = conditions_of(cluster)[names.CONDITION_CONTROLLER_RESIZE_ERROR]
    assert condition["message"].startswith("failed to expand pvc with rpc error: code = OutOfRange")
    assert status_of(cluster)["allocatedResources"] == {"storage": "8Mi"}
    await wait_until(lambda: messages(cluster, claim, "VolumeResizeFailed"))  # after the status
    # With the fast backoff (50 ms doubling) there would be several calls by now.
    await assert_stays(lambda: calls.count("ControllerExpandVolume") == 1, duration=0.6)

    grow(cluster, "data", "3Mi")  # recovery: the user asks for less than what failed
    await wait_until(lambda: status_of(cluster)["capacity"]["storage"] == "3Mi")
    assert status_of(cluster)["allocatedResources"] == {"storage": "3Mi"}
    assert pv_of(cluster, pv["metadata"]["name"])["spec"]["capacity"]["storage"] == "3Mi"
    assert not conditions_of(cluster)
    assert driver.state.volumes[pv["spec"]["csi"]["volumeHandle"]].size == 3 * MiB


@pytest.mark.parametrize(
    "driver_options", [{"limits": Limits(max_volume_size=4 * MiB)}], indirect=True
)
async def test_an_infeasible_request_is_tried_again_after_the_slow_interval(
    cluster: EmulatedCluster, driver: Driver, operator: OperatorThread, calls: Calls
) -> None:
    await bound_claim(cluster, operator, volume_mode="Block")
    grow(cluster, "data", "8Mi")
    await wait_until(lambda: calls.count("ControllerExpandVolume") == 1)
    await wait_until(lambda: calls.count("ControllerExpandVolume") == 2, timeout=3.0)
    first, second = [t for m, t in calls.log if m == "ControllerExpandVolume"]
    assert second - first >= 0.9  # `--retry-interval-max` here: 1 s


@pytest.mark.parametrize(
    "driver_options", [{"features": {"controller_expansion": False}}], indirect=True
)
async def test_the_trivial_resizer_leaves_the_work_to_the_node(
    cluster: EmulatedCluster, driver: Driver, operator: OperatorThread, calls: Calls
) -> None:
    claim, pv = await bound_claim(cluster, operator, volume_mode="Block")
    grow(cluster, "data", "2Mi")
    await wait_until(lambda: resize_status(cluster) == names.RESIZE_NODE_PENDING)
    assert pv_of(cluster, pv["metadata"]["name"])["spec"]["capacity"]["storage"] == "2Mi"
    assert status_of(cluster)["capacity"]["storage"] == "1Mi"
    assert names.CONDITION_FS_RESIZE_PENDING in conditions_of(cluster)
    await wait_until(lambda: messages(cluster, claim, "FileSystemResizeRequired"))
    assert calls.count("ControllerExpandVolume") == 0


async def test_a_missing_expand_secret_is_named_with_the_servers_text(
    cluster: EmulatedCluster, operator: OperatorThread, calls: Calls
) -> None:
    """The class names a controller-expand secret that does not exist: VolumeResizeFailed
    carries Go's text around the API server's own not-found message, and no RPC is made."""
    await make_storage_class(
        cluster, operator, "sc",
        parameters={
            names.PARAM_CONTROLLER_EXPAND_SECRET_NAME: "expand-creds",
            names.PARAM_CONTROLLER_EXPAND_SECRET_NAMESPACE: "${pvc.namespace}",
        },
    )  # fmt: skip
    claim, _ = await bound_claim(cluster, operator)
    grow(cluster, "data", "2Mi")
    found = await wait_until(lambda: messages(cluster, claim, names.REASON_VOLUME_RESIZE_FAILED))
    assert found[0].endswith(
        ' failed: error getting secret expand-creds in namespace default: secrets "expand-creds"'
        " not found"
    )
    assert calls.count("ControllerExpandVolume") == 0
