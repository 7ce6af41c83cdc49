"""The resizer's pure decisions, table-tested.

We test these aspects:
- `plan_expansion`: the size `expandAndRecover` picks for each resize status, with and
  without a final error, the slow set, and the trivial resizer (Go's test-case names);
- `merge_resize_conditions`: other conditions kept, same types replaced, old ones kept or not;
- the gRPC-code tables: final, infeasible, in use;
- the slow set's interval; `pods_using` and `attachments_of`;
- `plan_modify`: skip, start, continue an uncertain target, delay an infeasible one;
- the driver's capabilities: node-only expansion, OFFLINE expansion; the resize modes.
"""

from __future__ import annotations

from typing import Any

import pytest

from kopf_csi import names
from kopf_csi.csi import Code, CSIError, DriverInfo
from kopf_csi.driver import Features
from kopf_csi.driver import capabilities as driver_capabilities
from kopf_csi.resizing import decisions, errors, inuse, modifications
from kopf_csi.resizing.decisions import Action
from kopf_csi.resizing.modes import ResizeMode, can_modify, resize_mode
from kopf_csi.resizing.slowset import SlowSet
from kopf_csi.resizing.status import merge_resize_conditions

DRIVER = "d.example.com"


def claim(request: str = "2Gi", capacity: str = "1Gi", **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "ns", "name": "c", "uid": "u1"},
        "spec": {"volumeName": "pv", "resources": {"requests": {"storage": request}}},
        "status": {"phase": "Bound", "capacity": {"storage": capacity}, **status},
    }


def pv(size: str = "1Gi", driver: str = DRIVER, uid: str = "u1") -> dict[str, Any]:
    return {
        "metadata": {"name": "pv"},
        "spec": {"capacity": {"storage": size}, "claimRef": {"namespace": "ns", "uid": uid},
                 "csi": {"driver": driver, "volumeHandle": "h"}},
    }  # fmt: skip


def allocated(size: str, state: str | None = None) -> dict[str, Any]:
    found: dict[str, Any] = {"allocatedResources": {"storage": size}}
    if state:
        found["allocatedResourceStatuses"] = {"storage": state}
    return found


def plan(c: Any, p: Any, *, final: bool = False, slow: bool = False, csi: bool = True) -> Any:
    return decisions.plan_expansion(
        c, p, driver=DRIVER, final_error=final, slow=slow, controller_expansion=csi
    )


@pytest.mark.parametrize(
    ("c", "p", "kwargs", "expected"),
    [
        pytest.param(claim(), pv(), {}, (Action.EXPAND, "2Gi", True), id="pv smaller, no status"),
        pytest.param(claim(), pv(driver="other"), {}, (Action.SKIP, "", True), id="not ours"),
        pytest.param(claim(), pv(uid="u2"), {}, (Action.SKIP, "", True), id="bound elsewhere"),
        pytest.param(claim("3Gi", **allocated("2Gi", names.RESIZE_CONTROLLER_IN_PROGRESS)),
                     pv(), {}, (Action.EXPAND, "2Gi", False),
                     id="in progress, uncertain: finish the allocated size first"),
        pytest.param(claim("3Gi", **allocated("2Gi", names.RESIZE_CONTROLLER_IN_PROGRESS)),
                     pv(), {"final": True}, (Action.EXPAND, "3Gi", True),
                     id="in progress after a final error: the new request"),
        pytest.param(claim("3Gi", **allocated("8Gi", names.RESIZE_CONTROLLER_INFEASIBLE)),
                     pv(), {}, (Action.EXPAND, "3Gi", True), id="infeasible, request lowered"),
        pytest.param(claim("8Gi", **allocated("8Gi", names.RESIZE_CONTROLLER_INFEASIBLE)),
                     pv(), {"slow": True}, (Action.DELAY, "8Gi", True),
                     id="infeasible, same size, in the slow set"),
        pytest.param(claim("8Gi", **allocated("8Gi", names.RESIZE_CONTROLLER_INFEASIBLE)),
                     pv(), {}, (Action.EXPAND, "8Gi", False), id="infeasible, slow interval over"),
        pytest.param(claim("3Gi", **allocated("2Gi", names.RESIZE_NODE_PENDING)),
                     pv("2Gi"), {}, (Action.SKIP, "", True),
                     id="pending on the node: let it finish"),
        pytest.param(claim("2Gi", **allocated("2Gi", names.RESIZE_NODE_PENDING)),
                     pv("2Gi"), {}, (Action.SKIP, "", True), id="expanded, node pending"),
        pytest.param(claim("2Gi", **allocated("2Gi", names.RESIZE_CONTROLLER_IN_PROGRESS)),
                     pv("2Gi"), {}, (Action.EXPAND, "2Gi", False),
                     id="expanded but not recorded: record it"),
        pytest.param(claim("2Gi", **allocated("3Gi", names.RESIZE_NODE_INFEASIBLE)),
                     pv("3Gi"), {"csi": False}, (Action.EXPAND, "2Gi", True),
                     id="node infeasible, trivial resizer: the request"),
        pytest.param(claim("2Gi", **allocated("3Gi", names.RESIZE_NODE_INFEASIBLE)),
                     pv("3Gi"), {}, (Action.EXPAND, "3Gi", False),
                     id="node infeasible, controller expansion: the allocated size"),
    ],
)  # fmt: skip
def test_plan_expansion(c: Any, p: Any, kwargs: Any, expected: Any) -> None:
    result = plan(c, p, **kwargs)
    assert (result.action, result.size, result.update_status) == expected


def test_needs_resize_compares_bytes_not_strings() -> None:
    assert not decisions.needs_resize(claim("1024Mi", "1Gi"))
    assert decisions.needs_resize(claim("1025Mi", "1Gi"))
    unbound = claim()
    unbound["status"]["phase"] = "Pending"
    assert not decisions.needs_resize(unbound)


def test_merge_resize_conditions() -> None:
    old = [{"type": "Resizing", "status": "True"}, {"type": "ModifyingVolume", "status": "True"}]
    new = [{"type": "FileSystemResizePending", "status": "True"}]
    kept = merge_resize_conditions(old, new, keep_old=True)
    assert [c["type"] for c in kept] == ["Resizing", "ModifyingVolume", "FileSystemResizePending"]
    dropped = merge_resize_conditions(old, [], keep_old=False)
    assert [c["type"] for c in dropped] == ["ModifyingVolume"]


@pytest.mark.parametrize("code", [c for c in Code if c is not Code.OK])
def test_error_tables(code: Code) -> None:
    error = CSIError("x", method="ControllerExpandVolume", code=code)
    non_final = {Code.CANCELLED, Code.DEADLINE_EXCEEDED, Code.UNAVAILABLE,
                 Code.RESOURCE_EXHAUSTED, Code.ABORTED}  # fmt: skip
    assert errors.is_final(error) == (code not in non_final)
    infeasible = {Code.INVALID_ARGUMENT, Code.OUT_OF_RANGE, Code.NOT_FOUND}
    assert errors.is_infeasible(error) == (code in infeasible)
    assert errors.is_in_use(error) == (code is Code.FAILED_PRECONDITION)


def test_errors_before_the_call_are_not_final() -> None:
    assert not errors.is_final(errors.ResizeError("no secret"))


def test_slow_set_interval() -> None:
    now = [100.0]
    slow = SlowSet(10.0, clock=lambda: now[0])
    slow.add("k")
    now[0] = 104.0
    slow.add("k")  # the first addition's interval stands
    assert slow.contains("k")
    assert slow.remaining("k") == pytest.approx(6.0)
    now[0] = 110.5
    assert not slow.contains("k")
    assert len(slow) == 0


def test_users_of_a_claim() -> None:
    uses = {"volumes": [{"persistentVolumeClaim": {"claimName": "c"}}]}
    pods = [
        {"metadata": {"name": "a"}, "spec": uses},
        {"metadata": {"name": "b"}, "spec": uses, "status": {"phase": "Succeeded"}},
        {"metadata": {"name": "x"}, "spec": {"volumes": [{"emptyDir": {}}]}},
    ]  # fmt: skip
    assert inuse.pods_using("c", pods) == ["a"]
    vas = [{"metadata": {"name": "va"}, "spec": {"source": {"persistentVolumeName": "pv"}}}]
    assert inuse.attachments_of("pv", vas) == ["va"]
    assert inuse.attachments_of("other", vas) == []


def with_class(vac: str, current: str = "", status: Any = None) -> dict[str, Any]:
    c = claim()
    c["spec"]["volumeAttributesClassName"] = vac
    if current:
        c["status"]["currentVolumeAttributesClassName"] = current
    if status:
        c["status"]["modifyVolumeStatus"] = status
    return c


@pytest.mark.parametrize(
    ("c", "uncertain", "slow", "step", "vac"),
    [
        (with_class("gold", "gold"), False, False, modifications.Step.SKIP, ""),
        (with_class("gold"), False, False, modifications.Step.START, "gold"),
        (with_class("gold", "silver"), False, False, modifications.Step.START, "gold"),
        (with_class("gold", "", {"status": "InProgress", "targetVolumeAttributesClassName": "x"}),
         True, False, modifications.Step.CONTINUE, "x"),
        (with_class("gold", "", {"status": "InProgress", "targetVolumeAttributesClassName": "x"}),
         False, False, modifications.Step.START, "gold"),
        (with_class("bad", "", {"status": "Infeasible", "targetVolumeAttributesClassName": "bad"}),
         False, True, modifications.Step.DELAY, "bad"),
    ],
)  # fmt: skip
def test_plan_modify(c: Any, uncertain: bool, slow: bool, step: Any, vac: str) -> None:
    target = modifications.plan_modify(c, uncertain=uncertain, slow=slow)
    assert target.step is step
    if vac:
        assert target.vac == vac


def driver(controller: set[str], plugin: frozenset[str] = frozenset({"CONTROLLER_SERVICE"})) -> Any:
    return DriverInfo(
        name=DRIVER, vendor_version="1", manifest={}, plugin_capabilities=plugin,
        volume_expansion=frozenset(), controller_capabilities=frozenset(controller),
    )  # fmt: skip


def test_resize_modes() -> None:
    assert resize_mode(driver({"EXPAND_VOLUME"}), set()) is ResizeMode.CSI
    assert resize_mode(driver(set()), {"EXPAND_VOLUME"}) is ResizeMode.TRIVIAL
    assert resize_mode(driver(set()), set()) is ResizeMode.DISABLED
    assert resize_mode(driver({"EXPAND_VOLUME"}, frozenset()), set()) is ResizeMode.DISABLED
    assert can_modify(driver({"MODIFY_VOLUME"}))
    assert not can_modify(driver(set()))


def test_driver_node_only_and_offline_expansion() -> None:
    node_only = Features(controller_expansion=False)
    assert "EXPAND_VOLUME" not in driver_capabilities.controller_capabilities(node_only)
    assert "EXPAND_VOLUME" in driver_capabilities.node_capabilities(node_only)
    assert driver_capabilities.volume_expansion(Features(online_expansion=False)) == ["OFFLINE"]
    assert driver_capabilities.volume_expansion(Features()) == ["ONLINE"]
