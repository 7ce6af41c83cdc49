"""What a failed attach or detach says: the Go `err.Error()` text and the gRPC code.

external-attacher writes a failure into `status.attachError`/`detachError` as
`{message: err.Error(), time, errorCode}` and retries it, whatever it was: `isFinalError`
classifies a ControllerPublish/Unpublish error, but its verdict is ignored (every error is
retried with the per-VA backoff). `is_final` keeps the table for the logs.
"""

from __future__ import annotations

from kopf_csi.csi.codes import Code
from kopf_csi.csi.errors import CSIError, go_text

__all__ = ["AttachError", "error_code", "error_text", "is_final"]


class AttachError(Exception):
    """A failure before or around the CSI call; the message is the Go sidecar's error text."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def error_text(error: BaseException) -> str:
    """The error as Go's `err.Error()` prints it: `rpc error: code = <Code> desc = <message>`."""
    if isinstance(error, AttachError):
        return error.message
    return go_text(error)


def error_code(error: BaseException) -> int | None:
    """The numeric gRPC code for `errorCode` (KEP-4876), or None for a non-gRPC failure."""
    return int(error.code) if isinstance(error, CSIError) else None


def is_final(error: BaseException) -> bool:
    """Whether the publish/unpublish is certainly not running on the driver any more.

    external-attacher's `isFinalError`; logged only, as upstream ignores it for retries.
    """
    # Sources: https://grpc.github.io/grpc/core/md_doc_statuscodes.html and the CSI spec.md.
    if not isinstance(error, CSIError):
        return False  # failed before the call: nothing can be in progress, but Go says False
    return error.code not in (
        Code.CANCELLED,  # gRPC: the client cancelled; the driver may have carried on
        Code.DEADLINE_EXCEEDED,  # gRPC: timeout; the driver may still be working
        Code.UNAVAILABLE,  # gRPC: server shutting down or connection broken mid-call
        Code.RESOURCE_EXHAUSTED,  # gRPC: temporarily out of resources; may still be running
        Code.ABORTED,  # CSI: "operation pending for volume"
    )
