"""What a failed ControllerExpandVolume/ControllerModifyVolume means (external-resizer's
`util.IsFinalError`, `IsInfeasibleError`, the controller's `inUseError`).

- Non-final: the driver may still be working on it (a timeout, a broken connection, "operation
  pending"); the claim stays ControllerResizeInProgress and the same size is retried.
- Infeasible (a subset of final): the request itself is wrong; the claim is marked
  ControllerResizeInfeasible, retried slowly, and the user may lower the request (recovery).
- Other final errors: ControllerResizeError, retried with backoff.
- FailedPrecondition from ControllerExpandVolume: "volume in use" (an offline-only driver).
"""

from __future__ import annotations

from kopf_csi.csi.codes import Code
from kopf_csi.csi.errors import CSIError, go_text

__all__ = ["ResizeError", "error_text", "is_final", "is_in_use", "is_infeasible"]

_NON_FINAL = frozenset(
    {
        Code.CANCELLED,  # gRPC: the client gave up; the driver may have carried on
        Code.DEADLINE_EXCEEDED,  # gRPC: timeout; the driver may still be working
        Code.UNAVAILABLE,  # gRPC: connection broken or server shutting down mid-call
        Code.RESOURCE_EXHAUSTED,  # gRPC: temporarily out of resources
        Code.ABORTED,  # CSI: "operation pending for volume"
    }
)
_INFEASIBLE = frozenset({Code.INVALID_ARGUMENT, Code.OUT_OF_RANGE, Code.NOT_FOUND})


class ResizeError(Exception):
    """A failure around the CSI call (a secret, a write); the message is the Go error text."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def error_text(error: BaseException) -> str:
    """The error as Go's `err.Error()` prints it (`rpc error: code = ... desc = ...`)."""
    if isinstance(error, ResizeError):
        return error.message
    return go_text(error)


def is_final(error: BaseException) -> bool:
    """`IsFinalError`: the operation is certainly not running on the driver any more.

    A non-gRPC error (ours, before the call) is not final, as in Go.
    """
    return isinstance(error, CSIError) and error.code not in _NON_FINAL


def is_infeasible(error: BaseException) -> bool:
    """`IsInfeasibleError`: InvalidArgument, OutOfRange, NotFound (CSI ControllerExpandVolume
    errors: unsupported capacity or capability, capacity out of range, no such volume)."""
    return isinstance(error, CSIError) and error.code in _INFEASIBLE


def is_in_use(error: BaseException) -> bool:
    """`inUseError`: FailedPrecondition means the volume is published and the plugin has only
    OFFLINE expansion (CSI spec, "ControllerExpandVolume Errors")."""
    return isinstance(error, CSIError) and error.code is Code.FAILED_PRECONDITION
