"""Fault injection for the emulated API over HTTP: answers with an error code (`Fault`),
another writer's write just before ours (`Race`, `Faults.lose_race`), a watch cut mid-stream
(`Faults.cut_watch`). The Python-level API is never affected.

Part of the emulator (``emulator.py`` puts the parts together); HTTP serving takes the faults
(``serving.py``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from kopf_csi.testing.kinds import Body

__all__ = ["LOST_ANSWER", "OTHER_WRITER", "Fault", "Faults", "Race"]


@dataclasses.dataclass
class Fault:
    """Answer matching requests with ``code``; ``None`` criteria match anything."""

    code: int
    verb: str | None = None  # get, list, watch, create, update, patch, delete
    resource: str | None = None  # plural
    name: str | None = None
    times: int | None = 1  # None: until removed
    message: str = "injected fault"
    body: str | None = None  # sent verbatim instead of a Status (e.g. malformed JSON)
    subresource: str | None = None  # "status"; "" for the object itself; None: either

    def matches(
        self, *, verb: str, plural: str, name: str | None, subresource: str | None = None
    ) -> bool:
        wanted = (
            (self.verb, verb), (self.resource, plural), (self.name, name),
            (self.subresource, subresource or ""),
        )  # fmt: skip
        return all(want is None or want == got for want, got in wanted)


LOST_ANSWER = 0
"""A fault's code for `Faults.lose_answer`: served, and the answer never sent."""

OTHER_WRITER = "other-writer"
"""The field manager of the writes `Faults.lose_race` makes before ours."""


def _other_writer(obj: Body) -> Body:
    meta = obj["metadata"]
    annotations = dict(meta.get("annotations") or {})
    annotations["testing.kopf-csi.dev/other-writer"] = str(int(meta["resourceVersion"]) + 1)
    return {**obj, "metadata": {**meta, "annotations": annotations}}


@dataclasses.dataclass(eq=False)
class Race:
    """Another writer's write, made just before a matching write of ours (`lose_race`)."""

    resource: str | None
    name: str | None
    times: int
    subresource: str | None
    change: Callable[[Body], Body]


class Faults:
    """API faults to inject over HTTP (the Python-level API is never affected)."""

    def __init__(self) -> None:
        self._faults: list[Fault] = []
        self._races: list[Race] = []
        self._cuts: list[list[Any]] = []  # [plural, events sent before the cut, times left]

    def cut_watch(self, resource: str, *, after: int = 1, times: int = 1) -> None:
        """The next watch of `resource` breaks off after `after` events, the connection
        dropped mid-stream (a server restart, a load balancer's idle cut, a GOAWAY)."""
        self._cuts.append([resource, after, times])

    def take_cut(self, plural: str) -> int | None:
        for cut in self._cuts:
            if cut[0] == plural:
                cut[2] -= 1
                if cut[2] <= 0:
                    self._cuts.remove(cut)
                return int(cut[1])
        return None

    def add(
        self,
        code: int,
        *,
        verb: str | None = None,
        resource: str | None = None,
        name: str | None = None,
        times: int | None = 1,
        message: str = "injected fault",
        body: str | None = None,
        subresource: str | None = None,
    ) -> Fault:
        """With `body`, answer `code` with that text as a JSON response (`"{not json"`)."""
        fault = Fault(code, verb, resource, name, times, message, body, subresource)
        self._faults.append(fault)
        return fault

    def lose_answer(
        self,
        *,
        verb: str | None = None,
        resource: str | None = None,
        name: str | None = None,
        times: int | None = 1,
    ) -> Fault:
        """Serve matching requests, then close the connection before the answer goes out: a
        write lands and its client sees only a reset (a server going away mid-request)."""
        fault = Fault(LOST_ANSWER, verb, resource, name, times)
        self._faults.append(fault)
        return fault

    def lose_race(
        self,
        resource: str,
        name: str | None = None,
        *,
        times: int = 1,
        subresource: str | None = "",
        change: Callable[[Body], Body] | None = None,
    ) -> Race:
        """Another writer writes the object just before each of our next `times` writes to it
        (a PATCH or PUT; `subresource` as for `add`), as on a real server: a write guarded by
        the version read before (a merge patch's or a PUT's resourceVersion) then answers the
        real 409, a JSON patch's `test` the real bare 422, and an unguarded write goes
        through. `change` is the other writer's edit (default: an annotation of its own)."""
        race = Race(resource, name, times, subresource, change or _other_writer)
        self._races.append(race)
        return race

    def take_race(
        self, *, verb: str, plural: str, name: str | None, subresource: str | None
    ) -> Race | None:
        if verb not in ("patch", "update"):
            return None
        for race in self._races:
            wanted = (
                (race.resource, plural),
                (race.name, name),
                (race.subresource, subresource or ""),
            )
            if all(want is None or want == got for want, got in wanted):
                race.times -= 1
                if race.times <= 0:
                    self._races.remove(race)
                return race
        return None

    def remove(self, fault: Fault | Race) -> None:
        if isinstance(fault, Race):
            if fault in self._races:
                self._races.remove(fault)
        elif fault in self._faults:
            self._faults.remove(fault)

    def clear(self) -> None:
        self._faults.clear()
        self._races.clear()

    def __len__(self) -> int:
        return len(self._faults) + len(self._cuts) + len(self._races)

    def take(
        self, *, verb: str, plural: str, name: str | None, subresource: str | None = None
    ) -> Fault | None:
        for fault in self._faults:
            if fault.matches(verb=verb, plural=plural, name=name, subresource=subresource):
                if fault.times is not None:
                    fault.times -= 1
                    if fault.times <= 0:
                        self._faults.remove(fault)
                return fault
        return None
