"""The gRPC status codes, as CSI drivers return them.

Our own enum, so that neither the operator's decisions nor the reference driver depend on
grpclib's types. The numbers are gRPC's (and so the wire's); `kopf_csi.csi` maps them to and
from grpclib at its boundary.
"""

from __future__ import annotations

import enum

__all__ = ["Code"]


class Code(enum.IntEnum):
    """A gRPC status code (https://grpc.github.io/grpc/core/md_doc_statuscodes.html)."""

    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    ABORTED = 10
    OUT_OF_RANGE = 11
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    DATA_LOSS = 15
    UNAUTHENTICATED = 16

    @property
    def title(self) -> str:
        """The Go name of the code (`DeadlineExceeded`), as the Go sidecars print and label it."""
        return "".join(part.capitalize() for part in self.name.split("_")).replace(
            "Cancelled", "Canceled"
        )
