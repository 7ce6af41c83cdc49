"""The one exception tree for everything that can go wrong talking to a CSI driver.

    CSIError                 every failure: a gRPC status, a lost connection, a missing socket
     ├── CSITimeoutError     the call's deadline expired (our timer or the driver's, same thing)
     └── DriverNotReadyError the driver did not become ready within the bounded start-up wait

Each carries the full gRPC method (`/csi.v1.Controller/CreateVolume`, as the Go sidecars label
their metrics) and a `Code`. Whether a code is final, in progress or a reason to reschedule
depends on the operation, so that decision lives with the operations, not here. The text of an
error never contains secret values: the client scrubs them before raising.
"""

from __future__ import annotations

from kopf_csi.csi.codes import Code

__all__ = ["CSIError", "CSITimeoutError", "DriverNotReadyError", "go_text"]


class CSIError(Exception):
    """A CSI call failed; `code` says how, `method` says which call."""

    def __init__(self, message: str, *, method: str, code: Code) -> None:
        super().__init__(message)
        self.message = message
        self.method = method
        self.code = code

    def __str__(self) -> str:
        return f"{self.method}: {self.code.name}: {self.message}"

    def __repr__(self) -> str:
        name = type(self).__name__
        return f"{name}({self.message!r}, method={self.method!r}, code={self.code.name})"


class CSITimeoutError(CSIError):
    """The call did not finish within its timeout; the driver may still be working on it."""

    def __init__(self, message: str, *, method: str, driver_message: str | None = None) -> None:
        super().__init__(message, method=method, code=Code.DEADLINE_EXCEEDED)
        self.driver_message = driver_message
        """The driver's own text when it answered DEADLINE_EXCEEDED; None when our timer fired."""


def go_text(error: BaseException) -> str:
    """The error as a Go sidecar's `err.Error()` prints it, for events and status fields.

    A gRPC status prints as `rpc error: code = <Code> desc = <message>`; our own expired timer
    as Go's expired context does. Anything else is already in our (Go-worded) text.
    """
    if isinstance(error, CSITimeoutError):
        desc = (
            error.driver_message
            if error.driver_message is not None
            else ("context deadline exceeded")
        )
        return f"rpc error: code = DeadlineExceeded desc = {desc}"
    if isinstance(error, CSIError):
        return f"rpc error: code = {error.code.title} desc = {error.message}"
    return str(error)


class DriverNotReadyError(CSIError):
    """The driver never answered Probe with ready within the start-up wait."""
