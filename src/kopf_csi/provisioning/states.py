"""What a failed provisioning attempt means for the claim: the library's states, and the gRPC table.

A failed CreateVolume is not just "an error": a timed-out call may still be creating the volume
in the backend, and forgetting about it would leak that volume if the claim is deleted
meanwhile. So, as in sig-storage-lib-external-provisioner, every failure carries a
`ProvisioningState`, and `state_for` classifies CreateVolume errors by gRPC code exactly like
external-provisioner's `checkError`. `failure_outcome` then applies the library's error handling
(the infeasible slow retry and the reschedule), and `slow_retry_delay` the infeasible delay.

What is not here: retry timing (`backoff`), and acting on the outcome (the handlers).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import Any

from kopf_csi import names
from kopf_csi.csi.codes import Code
from kopf_csi.csi.errors import CSIError, go_text

__all__ = [
    "FailureOutcome",
    "ProvisioningState",
    "SlowRetry",
    "error_text",
    "failure_outcome",
    "is_infeasible",
    "slow_retry_delay",
    "state_for",
]


class ProvisioningState(enum.Enum):
    """Where a provisioning attempt stands after it returned (the library's `ProvisioningState`)."""

    FINISHED = "Finished"
    """Nothing is running on the driver: a deleted claim needs no more work (a live one retries)."""
    IN_BACKGROUND = "InBackground"
    """The driver may still be creating the volume: retry with the same name, even if deleted."""
    NO_CHANGE = "NoChange"
    """Failed before anything could start; keep whatever the previous state was."""
    RESCHEDULE = "Reschedule"
    """Give the node back to the scheduler: remove the selected-node annotation."""


def state_for(error: BaseException, *, may_reschedule: bool) -> ProvisioningState:
    """Classify a CreateVolume failure (external-provisioner's `checkError`).

    `may_reschedule` is true when the driver supports topology and a node was selected: only
    then can the scheduler try elsewhere, and only then does a retry differ from this attempt.
    """
    # Sources: https://grpc.github.io/grpc/core/md_doc_statuscodes.html and the CSI spec.md.
    if not isinstance(error, CSIError):
        # Not a gRPC status: the call failed before or around the driver, and we cannot know
        # whether an earlier CreateVolume is still running. Be on the safe side.
        return ProvisioningState.IN_BACKGROUND
    match error.code:
        case Code.RESOURCE_EXHAUSTED:
            # CSI: "Unable to provision in `accessible_topology`"; the operation is not pending.
            # gRPC also uses it for "message too large" (spec issue #419); like the Go code we
            # assume the limits are large enough and the driver is out of space.
            return ProvisioningState.RESCHEDULE if may_reschedule else ProvisioningState.FINISHED
        case Code.CANCELLED:  # gRPC: the client cancelled; the driver may have carried on
            return ProvisioningState.IN_BACKGROUND
        case Code.DEADLINE_EXCEEDED:  # gRPC: timeout; the driver may still be working
            return ProvisioningState.IN_BACKGROUND
        case Code.UNAVAILABLE:  # gRPC: server shutting down or connection broken mid-call
            return ProvisioningState.IN_BACKGROUND
        case Code.ABORTED:  # CSI: "Operation pending for volume"
            return ProvisioningState.IN_BACKGROUND
        case _:
            # Every other code means provisioning did not start or failed: not in progress.
            return ProvisioningState.FINISHED


def is_infeasible(error: BaseException) -> bool:
    """The driver rejected the request itself (InvalidArgument), or a back end said so in its
    result (`ProvisioningError.infeasible`): retrying soon cannot help."""
    if getattr(error, "infeasible", False) is True:
        return True
    return isinstance(error, CSIError) and error.code is Code.INVALID_ARGUMENT


def error_text(error: BaseException) -> str:
    """The error as the Go sidecar's `err.Error()` prints it, for events.

    A gRPC status prints as `rpc error: code = <Code> desc = <message>`; our own call timeout as
    Go's expired context does. Other errors (ours) already carry the Go wording.
    """
    return go_text(error)


@dataclasses.dataclass(frozen=True)
class FailureOutcome:
    """What to do after a failed attempt (the library's `provisionVolumeErrorHandling`)."""

    state: ProvisioningState
    """The state to remember: only `IN_BACKGROUND` keeps a deleted claim in progress."""
    message: str
    """The Warning `ProvisioningFailed` event's message."""
    infeasible: bool = False
    """Delay the claim by `retry_interval_max` unless its StorageClass changes (`SlowRetry`)."""
    reschedule: bool = False
    """Remove the selected-node annotation; once removed, stop without a retry."""


def failure_outcome(
    error: BaseException,
    *,
    state: ProvisioningState,
    claim: Mapping[str, Any],
) -> FailureOutcome:
    """Turn a failed attempt's error and state into the event, the state and the next step."""
    text = error_text(error)
    if is_infeasible(error):
        message = names.MESSAGE_INFEASIBLE.format(error=text)
        return FailureOutcome(ProvisioningState.FINISHED, message, infeasible=True)
    annotations = claim.get("metadata", {}).get("annotations") or {}
    if state is ProvisioningState.RESCHEDULE and names.ANN_SELECTED_NODE in annotations:
        return FailureOutcome(ProvisioningState.FINISHED, text, reschedule=True)
    if state is ProvisioningState.RESCHEDULE:
        # Without a selected node there is nothing to give back: treat it as final.
        return FailureOutcome(ProvisioningState.FINISHED, text)
    return FailureOutcome(state, text)


@dataclasses.dataclass(frozen=True)
class SlowRetry:
    """A claim that failed as infeasible: when, and under which StorageClass (by UID)."""

    since: float
    storage_class_uid: str


def slow_retry_delay(
    entry: SlowRetry | None,
    *,
    now: float,
    storage_class_uid: str,
    retry_interval_max: float,
) -> float | None:
    """Seconds the claim must still wait, or None to provision now (and forget the entry).

    A changed StorageClass (a new UID: deleted and recreated with a fix) ends the wait at once.
    """
    if entry is None or entry.storage_class_uid != storage_class_uid:
        return None
    remaining = retry_interval_max - (now - entry.since)
    return remaining if remaining > 0 else None
