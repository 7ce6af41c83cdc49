"""What a failed snapshot operation says, and whether CreateSnapshot may still be running.

`SnapshotError` carries the Go sidecar's error text (what users see in `status.error.message`
and in events) and the latest version of the content the operation had written, which the
error status is then written onto (upstream passes `contentObj` on the same way).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kopf_csi import names
from kopf_csi.csi.codes import Code
from kopf_csi.csi.errors import CSIError, go_text
from kopf_csi.provisioning.gofmt import go_quote

__all__ = ["SnapshotError", "controller_update_error", "error_text", "is_final", "quoted"]


class SnapshotError(Exception):
    """A failure of one step; `message` is the Go error text, `content` the newest body."""

    def __init__(self, message: str, *, content: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.content = content


def error_text(error: BaseException) -> str:
    """`err.Error()` as Go prints it: `rpc error: code = <Code> desc = <message>` for gRPC."""
    if isinstance(error, SnapshotError):
        return error.message
    return go_text(error)


def quoted(error: BaseException | str) -> str:
    """Go's `%q` of an error (or a string)."""
    return go_quote(error if isinstance(error, str) else error_text(error))


def controller_update_error(content: str, message: str) -> str:
    """`newControllerUpdateError`: a failed write of the content to the API server."""
    return names.ERROR_SNAPSHOT_CONTROLLER_UPDATE.format(content=content, error=message)


def is_final(error: BaseException) -> bool:
    """`isCSIFinalError`: whether CreateSnapshot is certainly not running on the driver.

    Non-final errors keep the being-created annotation, so that the content is not released
    (and the snapshot leaked) while the driver may still be cutting it.
    """
    # Sources: https://grpc.github.io/grpc/core/md_doc_statuscodes.html and the CSI spec.md.
    if not isinstance(error, CSIError):
        return False  # not a gRPC status: a previous call may be in progress, be safe
    return error.code not in (
        Code.CANCELLED,  # gRPC: the client cancelled; the driver may have carried on
        Code.DEADLINE_EXCEEDED,  # gRPC: timeout; the driver may still be working
        Code.UNAVAILABLE,  # gRPC: server shutting down or connection broken mid-call
        Code.RESOURCE_EXHAUSTED,  # gRPC: temporarily out of resources; may still be running
        Code.ABORTED,  # CSI: "operation pending for snapshot"
    )
