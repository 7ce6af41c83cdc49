"""The driver's one exception: a CSI error code and a message for the caller.

Domain code raises `DriverError(Code.NOT_FOUND, "...")` and never touches gRPC; the call wrapper
in `calls` turns it into the gRPC status. Messages must never contain secret values.
"""

from __future__ import annotations

from kopf_csi.csi.codes import Code

__all__ = ["DriverError"]


class DriverError(Exception):
    """An RPC fails with this code and message."""

    def __init__(self, code: Code, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def __repr__(self) -> str:
        return f"DriverError({self.code.name}, {self.message!r})"
