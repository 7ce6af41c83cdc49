"""The CSI protocol layer: the only package that imports grpclib and the generated stubs.

- `client.CSIClient`: the async client the operator uses, one per driver socket.
- `errors`: `CSIError` and its two subclasses, the only exceptions a CSI call raises.
- `codes.Code`: gRPC status codes, our own enum; `driverinfo.DriverInfo`: a driver's capabilities.
- `messages`: the generated CSI v1 messages (secrets stripped from their reprs).
- `serving`: what the reference driver needs to serve these messages over a unix socket.
- `speedups`: betterproto2's serialiser without its per-field waste, the same bytes (installed
  by `messages`).
"""

from kopf_csi.csi import messages
from kopf_csi.csi.client import CallObserver, CSIClient, parse_address
from kopf_csi.csi.codes import Code
from kopf_csi.csi.driverinfo import DriverInfo
from kopf_csi.csi.errors import CSIError, CSITimeoutError, DriverNotReadyError, go_text
from kopf_csi.csi.redaction import STRIPPED, redact

__all__ = [
    "STRIPPED",
    "CSIClient",
    "CSIError",
    "CSITimeoutError",
    "CallObserver",
    "Code",
    "DriverInfo",
    "DriverNotReadyError",
    "go_text",
    "messages",
    "parse_address",
    "redact",
]
