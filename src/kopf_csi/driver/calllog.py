"""A record of what each volume-changing RPC actually did: created, found, deleted, published.

The rpc_handled log line says that a call succeeded; it cannot say whether a CreateVolume made a
new volume or returned the one it had under that name. Suites that count "operations done
twice" (the chaos suite) need exactly that, so the operations report their effect here::

    calls = CallLog(path=workdir / "calls.jsonl")   # the file is optional
    driver = Driver(config, socket_path=sock, calls=calls)
    calls.subscribe(lambda record: ...)             # called synchronously, as the effect lands
    calls.records                                   # every record so far, in order

One record per successful call, written after the change is saved in the driver's state; failed
calls (refused, injected faults) change nothing and are not recorded. The log belongs to the
`Driver`, not to a started instance, so it spans restarts like the fault rules do. With a path,
each record is also appended to it as one JSON line (no fsync: this is an observation aid).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import time
from collections.abc import Callable
from typing import Literal

__all__ = ["CallLog", "CallRecord", "Outcome", "read_jsonl"]

Outcome = Literal[
    "created",  # CreateVolume made a new volume
    "existing",  # CreateVolume returned the volume it had under that name
    "deleted",  # DeleteVolume removed a volume
    "absent",  # DeleteVolume/ControllerUnpublishVolume of a volume that does not exist
    "published",  # ControllerPublishVolume recorded a new attachment
    "already",  # ControllerPublishVolume of a pair that was published already
    "unpublished",  # ControllerUnpublishVolume removed attachments
    "not_published",  # ControllerUnpublishVolume of a pair that was not published
]


@dataclasses.dataclass(frozen=True, kw_only=True)
class CallRecord:
    method: str
    outcome: Outcome
    volume_id: str
    name: str = ""
    """CreateVolume: the requested name (the provisioner derives it from the claim)."""
    node_id: str = ""
    at: float = 0.0
    """time.time() when the effect was saved."""


class CallLog:
    """Records in memory (and optionally as JSON lines), with synchronous subscribers."""

    def __init__(self, *, path: pathlib.Path | None = None) -> None:
        self.path = path
        self.records: list[CallRecord] = []
        self._subscribers: list[Callable[[CallRecord], None]] = []

    def subscribe(self, callback: Callable[[CallRecord], None]) -> None:
        self._subscribers.append(callback)

    def record(
        self, method: str, outcome: Outcome, *, volume_id: str, name: str = "", node_id: str = ""
    ) -> CallRecord:
        record = CallRecord(
            method=method,
            outcome=outcome,
            volume_id=volume_id,
            name=name,
            node_id=node_id,
            at=time.time(),
        )
        self.records.append(record)
        if self.path is not None:
            with self.path.open("a", encoding="utf-8") as file:
                file.write(json.dumps(dataclasses.asdict(record), separators=(",", ":")) + "\n")
        for callback in list(self._subscribers):
            callback(record)
        return record

    def count(self, method: str, outcome: Outcome) -> int:
        return sum(1 for r in self.records if r.method == method and r.outcome == outcome)


def read_jsonl(path: pathlib.Path) -> list[CallRecord]:
    """The records a `CallLog(path=...)` wrote (another process's, for instance)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return [CallRecord(**json.loads(line)) for line in lines if line.strip()]
