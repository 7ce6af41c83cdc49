"""How long the emulated API takes to answer: a real server's request durations under load.

A real kube-apiserver answers a write once etcd has committed it, and a loaded one takes tens of
milliseconds for some writes (`/work/shared/reference/real-apiserver.md`, "Burst latency": its
own `apiserver_request_duration_seconds` over a 200-claim burst on 2 shared cores). The
emulator answers in microseconds, so a client that waits behind a write (a journal commit, a
PV's POST) looked far faster here than there. A `LatencyModel` gives each request a duration
by verb and resource; the request waits that long before it is applied, and the server serves
others meanwhile. Writes to one object are serialised, as etcd serialises them: a write waits
for the previous write to the same object, then for its own duration. Writes to different
objects, and reads, overlap freely. Watches are not delayed.

The model is the server's, not HTTP's: the clients that write through the Python-level API
take the same time when the cluster has a model, through `Latency.request` with an
`ObjectPath`: the KCM stand-in (``kcm.py``: each controller's worker waits for its writes, as
KCM's do) and the benchmark's client (its claims' POSTs and DELETEs, 50 at a time, as the real
test client's 50 threads).

Durations are drawn from a log-normal distribution around each mean (a loaded server has a
tail), from a seeded generator, so two runs of one model draw the same sequence.

    cluster = EmulatedCluster(latency=REAL_SERVER)      # the measured burst
    cluster = EmulatedCluster(write_latency=0.002)      # every write 2 ms, reads at once
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import random
from collections.abc import AsyncIterator, Mapping
from typing import NamedTuple, Protocol

__all__ = [
    "NO_LATENCY", "REAL_SERVER", "Latency", "LatencyModel", "Lateness", "ObjectPath",
    "uniform_writes",
]  # fmt: skip

WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class Target(Protocol):
    """What the latency depends on in a request's path (the emulator's parsed path)."""

    @property
    def plural(self) -> str: ...
    @property
    def namespace(self) -> str | None: ...
    @property
    def name(self) -> str | None: ...
    @property
    def subresource(self) -> str | None: ...


class ObjectPath(NamedTuple):
    """A `Target` for a request made without HTTP: the Python-level writes of the in-process
    controllers and the benchmark's client, timed as if they were sent (`Latency.request`)."""

    plural: str
    namespace: str | None
    name: str | None  # None: a create (or a list)
    subresource: str | None = None


@dataclasses.dataclass(frozen=True)
class LatencyModel:
    """Mean seconds per request, by `"<METHOD> <plural>[/<subresource>]"`, and defaults."""

    means: Mapping[str, float] = dataclasses.field(default_factory=dict)
    write: float = 0.0
    """A write not named in `means`."""
    read: float = 0.0
    """A GET (one object or a list page) not named in `means`."""
    sigma: float = 0.0
    """Spread: the log-normal's sigma (0: every request takes exactly its mean)."""
    seed: int = 0
    sequential: Mapping[str, float] = dataclasses.field(default_factory=dict)
    """Means for the requests of a worker that sends one at a time (KCM's claim, volume and
    protection workers), where they differ from `means`: a burst's mean mixes the requests
    sent at its peak, with hundreds in flight, and those sent one by one after it."""

    def mean(self, method: str, resource: str, *, sequential: bool = False) -> float:
        name = f"{method} {resource}"
        if sequential and name in self.sequential:
            return self.sequential[name]
        default = self.write if method in WRITE_METHODS else self.read
        return self.means.get(name, default)

    @property
    def enabled(self) -> bool:
        return bool(self.write or self.read or any(self.means.values()))

    def scaled(self, factor: float) -> LatencyModel:
        """The same model with every mean (the defaults and the workers' means too) times
        `factor`: one server, uniformly slower (or faster); the spread and the seed kept."""
        if factor < 0:
            raise ValueError(f"a negative factor: {factor}")
        return dataclasses.replace(
            self,
            means={name: mean * factor for name, mean in self.means.items()},
            write=self.write * factor,
            read=self.read * factor,
            sequential={name: mean * factor for name, mean in self.sequential.items()},
        )


NO_LATENCY = LatencyModel()


def uniform_writes(seconds: float) -> LatencyModel:
    """Every write waits `seconds`, reads none (the emulator's older `write_latency`)."""
    return LatencyModel(write=max(0.0, seconds))


REAL_SERVER = LatencyModel(
    # real-apiserver.md, "Burst latency", the kopf-csi column: the server's own mean duration
    # per request over one 200-claim burst (create and delete phases), 2 shared cores.
    means={
        "POST persistentvolumes": 0.047,
        "POST persistentvolumeclaims": 0.024,
        "PUT persistentvolumeclaims": 0.021,
        "PUT persistentvolumeclaims/status": 0.021,
        "PATCH persistentvolumeclaims": 0.021,
        "PATCH configmaps": 0.028,  # the in-flight journal
        "POST configmaps": 0.028,
        "POST events": 0.009,
        "PATCH events": 0.009,
        "PATCH persistentvolumes": 0.007,
        "PUT persistentvolumes": 0.008,
        "PUT persistentvolumes/status": 0.004,
        "DELETE persistentvolumeclaims": 0.046,
        "DELETE persistentvolumes": 0.008,
        "GET persistentvolumeclaims": 0.003,
        "GET persistentvolumes": 0.002,
    },
    write=0.010,  # other writes (leases, VolumeAttachments, snapshots): not measured; 10 ms
    read=0.003,  # other reads (pvc-protection's LIST of pods): not measured; as the GETs
    sigma=0.5,
    seed=1,
    # KCM's single workers write one object at a time, mostly after the burst's peak: the
    # binder's PUTs of a claim and its status, the protection controllers' finalizer PUTs.
    # PUT persistentvolumes/status, which only those workers send, took 4-5 ms; the 21 ms of
    # PUT persistentvolumeclaims is the mean with the annotation PUTs, 200 at once at the peak
    # (KCM's per-claim goroutines), which keep it. Binding 200 claims one by one at 21 ms per
    # PUT would take 9 s; the real server bound them 2.7-3 s after the last PV.
    sequential={
        "PUT persistentvolumeclaims": 0.005,
        "PUT persistentvolumeclaims/status": 0.005,
    },
)
"""The real v1.36 server measured with kopf-csi f871e19 (`bench --latency real`)."""


@dataclasses.dataclass
class Lateness:
    """What this process's event loop owes one client that sends its requests one after the
    other (a KCM worker): how much later than their durations its waits ended.

    The emulated server, its in-process clients, the driver and the benchmark's client share
    one loop; when it is busy, a wait ends late (6-11 ms on average in the churn runs). A
    worker whose every request ends late falls behind by that much per request, which no
    server duration accounts for: a real client's wait ends when the answer arrives. With a
    `Lateness`, a request's wait is shortened by what is owed (never below zero), and its own
    lateness is owed in turn; so the worker's requests keep the model's pace on average, the
    loop's lag no longer adding up over a queue. The worker forgets what is owed when its queue
    runs empty (nothing waited behind it)."""

    owed: float = 0.0
    credited: float = 0.0
    """Seconds taken off requests' waits in all."""

    def forgive(self) -> None:
        self.owed = 0.0

    async def sleep(self, seconds: float) -> None:
        """`seconds`, less what is owed; then owe whatever this wait itself ended late."""
        credit = min(seconds, self.owed)
        self.owed -= credit
        self.credited += credit
        loop = asyncio.get_running_loop()
        planned = seconds - credit
        started = loop.time()
        await asyncio.sleep(planned)
        self.owed += max(0.0, loop.time() - started - planned)


class Latency:
    """A model applied to the requests of one server: draws, and the per-object write order."""

    def __init__(self, model: LatencyModel = NO_LATENCY) -> None:
        self.model = model
        self._random = random.Random(model.seed)
        self._writing: dict[tuple[str, str | None, str], asyncio.Lock] = {}
        self._waiters: dict[tuple[str, str | None, str], int] = {}

    def draw(self, method: str, resource: str, *, sequential: bool = False) -> float:
        """One request's duration: log-normal around the mean (the mean is kept)."""
        mean = self.model.mean(method, resource, sequential=sequential)
        sigma = self.model.sigma
        if mean <= 0 or sigma <= 0:
            return max(0.0, mean)
        return mean * math.exp(self._random.gauss(-sigma * sigma / 2, sigma))

    @contextlib.asynccontextmanager
    async def request(
        self,
        method: str,
        target: Target | None,
        *,
        watch: bool,
        sequential: bool = False,
        lateness: Lateness | None = None,
    ) -> AsyncIterator[float]:
        """Wait before the request is served (under the object's write order for a write of
        one object); serve it inside the block, which is given the duration drawn (0 without
        a model). `sequential`: sent by a worker one request at a time
        (`LatencyModel.sequential`); `lateness`: that worker's account of this loop's lag."""
        if not self.model.enabled or watch or target is None:
            yield 0.0
            return
        resource = target.plural + (f"/{target.subresource}" if target.subresource else "")
        seconds = self.draw(method, resource, sequential=sequential)
        sleep = asyncio.sleep if lateness is None else lateness.sleep
        if method not in WRITE_METHODS or target.name is None:  # reads, and creates, overlap
            await sleep(seconds)
            yield seconds
            return
        key = (target.plural, target.namespace, target.name)  # status and main: one object
        lock = self._writing.setdefault(key, asyncio.Lock())
        self._waiters[key] = self._waiters.get(key, 0) + 1
        try:
            async with lock:
                await sleep(seconds)
                yield seconds
        finally:
            self._waiters[key] -= 1
            if not self._waiters[key]:  # nobody else holds or waits: forget the object
                del self._waiters[key], self._writing[key]
