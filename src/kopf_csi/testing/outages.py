"""The control plane going away and coming back, as a real one does in an upgrade.

A real kube-apiserver sent SIGTERM under load (`/work/shared/reference/real-apiserver.md`, "A
kube-apiserver restart, seen from its clients") does not simply stop answering:

- **draining** (about 20 s there): it goes on serving some requests; others get
  `503 ServiceUnavailable` `apiserver is shutting down` (with `Retry-After: 1`: the server's
  `WithWaitGroup` filter); connections it closes break under the client (aiohttp raised
  `ServerDisconnectedError` on reads, `ClientOSError(32, 'Broken pipe')` on writes); open
  watches end;
- **gone** (about 2 s): connects are refused;
- **back**: a new process serves; watches must be opened again.

And etcd stopped for a few seconds: requests hang, then fail: a write with etcd's own
`etcdserver: request timed out` (500, as the server wraps a storage error it cannot classify),
a read with the server's request timeout (504); discovery and `/version` are served from the
server's memory and do not wait.

`ControlPlane` is that state, and the verdict for each request: serve it, answer 503, or reset
its connection. Which one is deterministic (a fixed cycle over the requests of the drain), so
a test sees every kind of failure in a short drain and two runs see the same. The emulator
(`emulator.EmulatedCluster.restart_apiserver`, `stop_etcd`) moves it through the phases and
closes and opens the listening socket.
"""

from __future__ import annotations

import asyncio
import enum
import json
from typing import Any

__all__ = [
    "DRAIN_CYCLE",
    "ControlPlane",
    "Phase",
    "Verdict",
    "etcd_timeout_status",
    "request_timeout_status",
    "shutting_down_status",
]


class Phase(enum.Enum):
    SERVING = "serving"
    DRAINING = "draining"
    GONE = "gone"


class Verdict(enum.Enum):
    SERVE = "serve"
    SHUTTING_DOWN = "503"  # 503 apiserver is shutting down, Connection: close
    RESET = "reset"  # the connection closed under the request, no answer


DRAIN_CYCLE = (Verdict.SERVE, Verdict.SHUTTING_DOWN, Verdict.RESET)
"""The verdicts of the requests answered while draining, in turn (the real server served some,
refused others with a 503, and closed the connections of others)."""


def shutting_down_status() -> dict[str, Any]:
    """The body of the draining server's 503 (`NewServiceUnavailable`)."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "apiserver is shutting down",
        "reason": "ServiceUnavailable",
        "code": 503,
    }


def etcd_timeout_status() -> dict[str, Any]:
    """A write while etcd is away: the server's InternalError around etcd's text."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "Internal error occurred: etcdserver: request timed out",
        "reason": "InternalError",
        "details": {"causes": [{"message": "etcdserver: request timed out"}]},
        "code": 500,
    }


def request_timeout_status() -> dict[str, Any]:
    """A read while etcd is away, cut by the server's request timeout."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "Timeout: request did not complete within requested timeout - "
        "context deadline exceeded",
        "reason": "Timeout",
        "details": {},
        "code": 504,
    }


def status_bytes(status: dict[str, Any]) -> bytes:
    """As the server writes a Status: compact JSON and a newline."""
    return (json.dumps(status, separators=(",", ":")) + "\n").encode()


class ControlPlane:
    """Where the emulated control plane stands, and what each request meets.

    Counts what was done to requests (`served_while_draining`, `answered_503`, `reset`, `hung`)
    so a test can check that the outage it asked for happened.
    """

    def __init__(self) -> None:
        self.phase = Phase.SERVING
        self.answered_503 = 0
        self.reset = 0
        self.served_while_draining = 0
        self.hung = 0
        self._turn = 0
        self._etcd_back: asyncio.Event | None = None  # set: etcd serves; None: never stopped
        self.etcd_timeout = 7.0
        """Seconds a request waits for a stopped etcd before it fails (etcd's client gives up
        on a write after about 7 s; the server's own request timeout is 60 s)."""

    # --- phases ------------------------------------------------------------------------------

    def drain(self) -> None:
        self.phase = Phase.DRAINING
        self._turn = 0

    def go(self) -> None:
        self.phase = Phase.GONE

    def come_back(self) -> None:
        self.phase = Phase.SERVING

    def stop_etcd(self, timeout: float | None = None) -> None:
        if timeout is not None:
            self.etcd_timeout = timeout
        self._etcd_back = asyncio.Event()

    def start_etcd(self) -> None:
        if self._etcd_back is not None:
            self._etcd_back.set()

    # --- what a request meets ----------------------------------------------------------------

    def verdict(self) -> Verdict:
        """A request about to be answered: served, refused with a 503, or reset."""
        if self.phase is Phase.SERVING:
            return Verdict.SERVE
        if self.phase is Phase.GONE:
            self.reset += 1
            return Verdict.RESET
        verdict = DRAIN_CYCLE[self._turn % len(DRAIN_CYCLE)]
        self._turn += 1
        if verdict is Verdict.SHUTTING_DOWN:
            self.answered_503 += 1
        elif verdict is Verdict.RESET:
            self.reset += 1
        else:
            self.served_while_draining += 1
        return verdict

    async def wait_for_etcd(self, *, write: bool) -> dict[str, Any] | None:
        """Hold a request that needs etcd while it is stopped: None once etcd is back in time,
        else the Status to answer (a write's 500, a read's 504)."""
        back = self._etcd_back
        if back is None or back.is_set():
            return None
        self.hung += 1
        try:
            async with asyncio.timeout(self.etcd_timeout):
                await back.wait()
        except TimeoutError:
            return etcd_timeout_status() if write else request_timeout_status()
        return None
