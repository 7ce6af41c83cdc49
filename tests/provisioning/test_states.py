"""What a failed CreateVolume means: the `checkError` table and the library's error handling.

We test these aspects:
- every gRPC code, with and without rescheduling allowed, maps as in external-provisioner;
- non-gRPC errors count as "may still be running" (in background);
- InvalidArgument is infeasible: a slow retry and its own event message;
- a Reschedule with a selected node removes it; without one it is simply final;
- the event texts print errors as Go's gRPC status errors;
- the infeasible delay: until `retry_interval_max` passes or the StorageClass is replaced;
- the errors carry their state (`final`), and an ignored claim says "ignored because ...".
"""

from __future__ import annotations

import pytest

from kopf_csi.csi import Code, CSIError, CSITimeoutError
from kopf_csi.provisioning.errors import IgnoredError, ProvisioningError
from kopf_csi.provisioning.states import (
    FailureOutcome,
    ProvisioningState,
    SlowRetry,
    error_text,
    failure_outcome,
    is_infeasible,
    slow_retry_delay,
    state_for,
)

from .factories import make_claim

FINISHED = ProvisioningState.FINISHED
BACKGROUND = ProvisioningState.IN_BACKGROUND
RESCHEDULE = ProvisioningState.RESCHEDULE
METHOD = "/csi.v1.Controller/CreateVolume"


def grpc(code: Code, message: str = "boom") -> CSIError:
    return CSIError(message, method=METHOD, code=code)


TABLE = {
    Code.CANCELLED: (BACKGROUND, BACKGROUND),
    Code.UNKNOWN: (FINISHED, FINISHED),
    Code.INVALID_ARGUMENT: (FINISHED, FINISHED),
    Code.DEADLINE_EXCEEDED: (BACKGROUND, BACKGROUND),
    Code.NOT_FOUND: (FINISHED, FINISHED),
    Code.ALREADY_EXISTS: (FINISHED, FINISHED),
    Code.PERMISSION_DENIED: (FINISHED, FINISHED),
    Code.RESOURCE_EXHAUSTED: (FINISHED, RESCHEDULE),
    Code.FAILED_PRECONDITION: (FINISHED, FINISHED),
    Code.ABORTED: (BACKGROUND, BACKGROUND),
    Code.OUT_OF_RANGE: (FINISHED, FINISHED),
    Code.UNIMPLEMENTED: (FINISHED, FINISHED),
    Code.INTERNAL: (FINISHED, FINISHED),
    Code.UNAVAILABLE: (BACKGROUND, BACKGROUND),
    Code.DATA_LOSS: (FINISHED, FINISHED),
    Code.UNAUTHENTICATED: (FINISHED, FINISHED),
}


@pytest.mark.parametrize(
    ("code", "may_reschedule", "expected"),
    [
        pytest.param(
            code,
            may,
            states[may],
            id=f"{code.name} {'may' if may else 'cannot'} reschedule -> {states[may].name}",
        )
        for code, states in TABLE.items()
        for may in (False, True)
    ],
)
def test_grpc_code_table(code: Code, may_reschedule: bool, expected: ProvisioningState) -> None:
    assert state_for(grpc(code), may_reschedule=may_reschedule) is expected


def test_every_error_code_is_in_the_table() -> None:
    assert set(TABLE) == set(Code) - {Code.OK}


@pytest.mark.parametrize(
    "error",
    [RuntimeError("x"), OSError("socket"), CSITimeoutError("timed out after 10s", method=METHOD)],
    ids=[
        "non-gRPC error -> in background",
        "OS error -> in background",
        "our timeout -> in background",
    ],
)
def test_other_errors_are_in_background(error: BaseException) -> None:
    assert state_for(error, may_reschedule=True) is BACKGROUND


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        pytest.param(grpc(Code.INVALID_ARGUMENT), True, id="InvalidArgument -> infeasible"),
        pytest.param(grpc(Code.OUT_OF_RANGE), False, id="OutOfRange -> not (resizer only)"),
        pytest.param(ValueError("x"), False, id="non-gRPC -> not"),
    ],
)
def test_is_infeasible(error: BaseException, expected: bool) -> None:
    assert is_infeasible(error) is expected


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        pytest.param(
            grpc(Code.RESOURCE_EXHAUSTED, "no space"),
            "rpc error: code = ResourceExhausted desc = no space",
            id="gRPC status -> rpc error text",
        ),
        pytest.param(
            grpc(Code.CANCELLED, "stop"),
            "rpc error: code = Canceled desc = stop",
            id="cancelled -> Go spelling Canceled",
        ),
        pytest.param(
            CSITimeoutError("timed out after 10s", method=METHOD),
            "rpc error: code = DeadlineExceeded desc = context deadline exceeded",
            id="our timeout -> Go's expired context",
        ),
        pytest.param(
            CSITimeoutError("timed out after 10s: slow", method=METHOD, driver_message="slow"),
            "rpc error: code = DeadlineExceeded desc = slow",
            id="the driver's DeadlineExceeded -> the driver's text",
        ),
        pytest.param(
            ProvisioningError("claim Selector is not supported", state=FINISHED),
            "claim Selector is not supported",
            id="our error -> its message",
        ),
    ],
)
def test_error_text(error: BaseException, expected: str) -> None:
    assert error_text(error) == expected


SELECTED = make_claim(annotations={"volume.kubernetes.io/selected-node": "node-1"})
ALPHA_ONLY = make_claim(annotations={"volume.alpha.kubernetes.io/selected-node": "node-1"})
UNSELECTED = make_claim()


@pytest.mark.parametrize(
    ("error", "state", "claim", "expected"),
    [
        pytest.param(
            grpc(Code.INVALID_ARGUMENT, "bad size"),
            FINISHED,
            UNSELECTED,
            FailureOutcome(
                FINISHED,
                "Volume provisioning failed with infeasible error. Retries will be delayed. rpc "
                "error: code = InvalidArgument desc = bad size",
                infeasible=True,
            ),
            id="InvalidArgument -> infeasible event and slow retry",
        ),
        pytest.param(
            grpc(Code.RESOURCE_EXHAUSTED, "full"),
            RESCHEDULE,
            SELECTED,
            FailureOutcome(
                FINISHED, "rpc error: code = ResourceExhausted desc = full", reschedule=True
            ),
            id="reschedule with selected node -> remove it",
        ),
        pytest.param(
            grpc(Code.RESOURCE_EXHAUSTED, "full"),
            RESCHEDULE,
            ALPHA_ONLY,
            FailureOutcome(FINISHED, "rpc error: code = ResourceExhausted desc = full"),
            id="reschedule with only the alpha key -> final, nothing removed",
        ),
        pytest.param(
            grpc(Code.RESOURCE_EXHAUSTED, "full"),
            RESCHEDULE,
            UNSELECTED,
            FailureOutcome(FINISHED, "rpc error: code = ResourceExhausted desc = full"),
            id="reschedule without selected node -> final",
        ),
        pytest.param(
            grpc(Code.DEADLINE_EXCEEDED, "slow"),
            BACKGROUND,
            SELECTED,
            FailureOutcome(BACKGROUND, "rpc error: code = DeadlineExceeded desc = slow"),
            id="timeout -> in background, plain event",
        ),
        pytest.param(
            ProvisioningError("no topology", state=ProvisioningState.NO_CHANGE),
            ProvisioningState.NO_CHANGE,
            SELECTED,
            FailureOutcome(ProvisioningState.NO_CHANGE, "no topology"),
            id="our no-change error -> kept, plain event",
        ),
    ],
)
def test_failure_outcome(
    error: BaseException,
    state: ProvisioningState,
    claim: dict[str, object],
    expected: FailureOutcome,
) -> None:
    assert failure_outcome(error, state=state, claim=claim) == expected


@pytest.mark.parametrize(
    ("entry", "now", "uid", "expected"),
    [
        pytest.param(None, 100.0, "sc-1", None, id="never infeasible -> go"),
        pytest.param(
            SlowRetry(100.0, "sc-1"), 160.0, "sc-1", 240.0, id="a minute later -> wait the rest"
        ),
        pytest.param(SlowRetry(100.0, "sc-1"), 400.0, "sc-1", None, id="five minutes later -> go"),
        pytest.param(
            SlowRetry(100.0, "sc-1"), 101.0, "sc-2", None, id="class replaced -> go at once"
        ),
    ],
)
def test_slow_retry_delay(
    entry: SlowRetry | None, now: float, uid: str, expected: float | None
) -> None:
    delay = slow_retry_delay(entry, now=now, storage_class_uid=uid, retry_interval_max=300.0)
    assert delay == expected


def test_provisioning_error() -> None:
    error = ProvisioningError("oops", state=BACKGROUND)
    assert (str(error), error.final, error.state) == ("oops", False, BACKGROUND)
    assert repr(error) == "ProvisioningError('oops', state=IN_BACKGROUND)"
    assert ProvisioningError("x", state=FINISHED).final


def test_ignored_error() -> None:
    error = IgnoredError("a populator does it", event_message="Assuming ...")
    assert str(error) == "ignored because a populator does it"
    assert (error.final, error.reason, error.event_message) == (
        True,
        "a populator does it",
        "Assuming ...",
    )
