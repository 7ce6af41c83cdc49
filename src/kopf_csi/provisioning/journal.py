"""A write-ahead record of the claims whose CreateVolume may be running on the driver.

external-provisioner keeps these claims in memory only (`claimsInProgress`), so a restart while
a CreateVolume is running, or after one timed out, forgets a claim that was deleted meanwhile,
and its backend volume leaks (its open issue #486). We record each claim in a ConfigMap before
calling CreateVolume and drop it once the outcome is known (the PV saved, or a final error).
After a restart, a recorded claim that no longer exists is provisioned to the end anyway: the
PV is created for the deleted claim, the controller manager marks it Released, and the normal
deletion path removes the backend volume (or keeps it, visibly, under Retain).

Cost: writes are group-committed. Every claim waiting to be recorded within one flush shares a
single JSON merge patch, and removals ride along with the next flush (or go out after
REMOVAL_DELAY), so a burst of claims costs a fraction of a write per claim and a lone claim
about one. Under steady churn (claims posted and deleted all day) a lane's next record comes
within a second, so a removal waits for it rather than taking a write of its own: a removal
is not urgent (a record left by a restart is finished as requested, as after a failed
removal), where every write is a request the API server and etcd also pay for.
A claim is never sent to the driver before its record is durable: a failed write fails the
attempt (and it is retried), which is the safe side.

Latency: a commit is a write to one object, and the API server serialises those (etcd: about
28 ms each on a loaded real server). With one ConfigMap, a claim that came while a commit was
in flight waited for it, then for its own: in a burst, claims went to the driver in batches,
one commit apart, and the PVs came in bursts and lulls. The journal is therefore `LANES`
ConfigMaps (`kopf-csi-inflight-<driver>`, then `-1`, `-2`, ...), each group-committing on its
own: a claim goes to a lane with no commit in flight, so its commit starts at once; only when
every lane is busy does it join the batch of the lane whose commit started first. A record
stays in its lane until it is removed. After a restart every lane is read. The number of lanes
is part of the format: it may grow, never shrink (records in a lane no longer read would be
forgotten).

Format: each record is a claim's UID → the JSON of `snapshot_of(claim)`, a claim-shaped object
(apiVersion, kind, metadata, spec), with `"journalFormat": FORMAT` beside them. Versions:

1. (the first releases, one ConfigMap, then the lanes) the snapshot alone, no `journalFormat`;
2. (this one) the same snapshot, with `"journalFormat": 2`.

`decode` reads every format up to `FORMAT` (a record without the key is format 1). A record
of a newer format (a newer release's, after a rollback) is neither acted on nor dropped: it is
left in its lane for that release, with a warning. A reader of format 1 that ignores unknown
keys (every release so far) reads format 2 as its own, so a rollback by one release loses
nothing either, as long as its lanes are read (docs/operations.md, "Upgrading").
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Mapping
from typing import Any

import structlog

from kopf_csi import jsoncodec, kube

__all__ = [
    "FORMAT",
    "LANES",
    "Journal",
    "JournalError",
    "decode",
    "encode",
    "journal_name",
    "lane_names",
    "snapshot_of",
]

log = structlog.get_logger("kopf_csi.journal")
Body = Mapping[str, Any]
LANES = 4
"""ConfigMaps per journal: commits in flight at once (never fewer than a release before)."""


FORMAT = 2
"""The format of the records this release writes; it reads every one up to it."""

FORMAT_KEY = "journalFormat"


class JournalError(RuntimeError):
    """The record could not be written; CreateVolume must not be called yet."""


REMOVAL_DELAY = 1.0
"""Seconds a lane's removals wait for its next record's write before going out alone (0.1 s
until issue 34: at 20 claims a second, 0.27 removal-only writes per claim; docs/benchmarks.md,
"Steady churn")."""


def journal_name(driver_name: str) -> str:
    """`kopf-csi-inflight-<driver>`, sanitised like the Go sidecars' lease names."""
    safe = "".join(c if c.isalnum() or c == "-" else "-" for c in driver_name.lower())
    return f"kopf-csi-inflight-{safe}".rstrip("-")[:253]


def lane_names(name: str, lanes: int = LANES) -> list[str]:
    """The lanes' ConfigMap names: `name` first (the journal of one ConfigMap before), then
    `name-1` ... (the base cut so that every name fits in 253 characters)."""
    return [name] + [f"{name[: 253 - len(str(i)) - 1]}-{i}" for i in range(1, lanes)]


def snapshot_of(claim: Body) -> dict[str, Any]:
    """What a retry of a deleted claim needs: its identity, annotations and spec."""
    meta = claim.get("metadata", {})
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            key: meta[key]
            for key in ("name", "namespace", "uid", "annotations", "labels")
            if key in meta
        },
        "spec": claim.get("spec", {}),
    }


def encode(claim: Body) -> str:
    """A claim's record: its snapshot and the format, as compact JSON."""
    record = {**snapshot_of(claim), FORMAT_KEY: FORMAT}
    return jsoncodec.stored(record)


class NewerFormatError(ValueError):
    """A record of a format newer than this release reads."""


def decode(raw: str) -> dict[str, Any]:
    """The claim snapshot of a record of any format up to `FORMAT`.

    Raises ValueError for a record that is not one, NewerFormatError for a newer format.
    """
    record = json.loads(raw)
    if not isinstance(record, dict):
        raise ValueError("not a JSON object")  # noqa: TRY004 (bad data, as bad JSON is)
    version = record.pop(FORMAT_KEY, 1)  # format 1 had no key
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ValueError(f"bad {FORMAT_KEY}: {version!r}")
    if version > FORMAT:
        raise NewerFormatError(f"format {version}, newer than this release's {FORMAT}")
    return record  # formats 1 and 2 hold the same snapshot


class Journal:
    """The in-flight claims of one driver, in `lanes` ConfigMaps (keys: claim UIDs)."""

    def __init__(
        self,
        api: kube.KubeClient,
        *,
        namespace: str,
        name: str,
        removal_delay: float = REMOVAL_DELAY,
        lanes: int = LANES,
    ) -> None:
        self.namespace = namespace
        self.name = name
        self.lanes = [
            _Lane(api, namespace=namespace, name=lane, removal_delay=removal_delay)
            for lane in lane_names(name, lanes)
        ]
        self.waited = 0.0
        """Seconds callers of `record` waited for their record to be durable, in all."""
        self.records = 0
        self._lane_of: dict[str, _Lane] = {}  # a record stays in its lane until it is removed

    @property
    def writes(self) -> int:
        return sum(lane.writes for lane in self.lanes)

    async def load(self) -> dict[str, dict[str, Any]]:
        """The recorded claims by UID, from every lane (after a restart: those that may still
        need finishing)."""
        claims: dict[str, dict[str, Any]] = {}
        for lane in self.lanes:
            for uid, claim in (await lane.load()).items():
                if uid in claims:  # recorded again in another lane, its removal lost here
                    lane.release(uid)
                    continue
                claims[uid] = claim
                self._lane_of[uid] = lane
        return claims

    async def record(self, claim: Body) -> None:
        """Return once the claim is durably recorded (raise JournalError if it cannot be)."""
        uid = str(claim["metadata"]["uid"])
        lane = self._lane_of.get(uid) or self._free_lane()
        self._lane_of[uid] = lane
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            await lane.record(uid, claim)
        finally:
            self.records += 1
            self.waited += loop.time() - started

    def holds(self, uid: str) -> bool:
        """Whether the claim is recorded (or about to be) in a lane and not being dropped."""
        return any(lane.holds(uid) for lane in self.lanes)

    def release(self, uid: str) -> None:
        """The outcome is known: drop the record with its lane's next flush (no waiting)."""
        lane = self._lane_of.pop(uid, None)
        if lane is not None:
            lane.release(uid)

    async def close(self) -> None:
        """Write what is pending (removals) in every lane, then stop."""
        await asyncio.gather(*(lane.close() for lane in self.lanes))

    def _free_lane(self) -> _Lane:
        """A lane with no commit in flight (the first such); else the one whose commit
        started first, which is likely to end first."""
        for lane in self.lanes:
            if not lane.busy:
                return lane
        return min(self.lanes, key=lambda lane: lane.busy_since)


class _Lane:
    """One ConfigMap of the journal, group-committed: one write in flight at a time.

    The records waiting for the next write are its batch; the batch being written is in
    flight. Each batch has one future, which every caller of `record` for a claim in it waits
    on.
    """

    def __init__(
        self, api: kube.KubeClient, *, namespace: str, name: str, removal_delay: float
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.name = name
        self.removal_delay = removal_delay
        self.writes = 0
        self.busy_since = 0.0  # loop time when its flusher, then its current write, started
        self._adds: dict[str, str] = {}
        self._removes: set[str] = set()
        self._batch: asyncio.Future[None] | None = None  # the next write's outcome
        self._writing: dict[str, asyncio.Future[None]] = {}  # in flight: uid -> its outcome
        self._dropped: set[str] = set()  # released while in flight: removed once written
        self._removing: set[str] = set()  # removals in flight
        self._recorded: set[str] = set()
        self._lock = asyncio.Lock()
        self._flusher: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._exists: bool | None = None  # unknown until `load()` or the first write

    async def load(self) -> dict[str, dict[str, Any]]:
        """The recorded claims by UID (after a restart: those that may still need finishing)."""
        config_map = await self.api.get(kube.CONFIGMAPS, self.name, self.namespace)
        self._exists = config_map is not None
        data = (config_map or {}).get("data") or {}
        claims = {}
        for uid, raw in data.items():
            try:
                claims[uid] = decode(raw)
            except NewerFormatError as exc:  # a newer release's: left for it, untouched
                log.warning("journal_entry_newer_format", uid=uid, lane=self.name, error=str(exc))
            except ValueError:
                log.warning("journal_entry_unreadable", uid=uid)
        self._recorded = set(claims)
        return claims

    @property
    def busy(self) -> bool:
        """A flush is scheduled or in flight: a new record would wait for it."""
        return self._flusher is not None and not self._flusher.done()

    def holds(self, uid: str) -> bool:
        """Whether the claim is recorded (or about to be) and not being dropped (read-only)."""
        if uid in self._removes or uid in self._dropped or uid in self._removing:
            return False
        return uid in self._recorded or uid in self._adds or uid in self._writing

    async def record(self, uid: str, claim: Body) -> None:
        """Return once the claim's record is durable (at once if it is already)."""
        self._dropped.discard(uid)
        if uid in self._writing:  # its write already in flight: wait for that write
            await asyncio.shield(self._writing[uid])  # its failure is this caller's too
        if uid in self._recorded and uid not in self._removes and uid not in self._removing:
            return  # durable, and no removal on its way: else written again after it
        await asyncio.shield(self._add(uid, claim))

    def _add(self, uid: str, claim: Body) -> asyncio.Future[None]:
        """Add the claim to the next write; the future is that write's outcome."""
        self._removes.discard(uid)
        if uid not in self._adds:
            self._adds[uid] = encode(claim)
        if self._batch is None:
            self._batch = asyncio.get_running_loop().create_future()
            self._batch.add_done_callback(_retrieved)  # a failure nobody waits for is no error
        batch = self._batch
        self._schedule(0.0)
        return batch

    def release(self, uid: str) -> None:
        if self._adds.pop(uid, None) is not None and uid not in self._recorded:
            return
        if uid in self._writing:  # removed once its write is done
            self._dropped.add(uid)
        elif uid in self._recorded:
            self._removes.add(uid)
            self._schedule(self.removal_delay)

    async def close(self) -> None:
        """Write what is pending (removals), then stop."""
        if self._flusher is not None:
            self._flusher.cancel()
        if self._adds or self._removes:
            await self._flush()

    def _schedule(self, delay: float) -> None:
        if self._flusher is None or self._flusher.done():
            self.busy_since = asyncio.get_running_loop().time()
            self._flusher = asyncio.create_task(self._flush_loop(delay))
        elif self._adds:
            self._wake.set()  # a claim is waiting: cut the removals' delay short

    async def _flush_loop(self, delay: float) -> None:
        """Flush until nothing is pending; adds go at once, removals after a short delay.

        A failed write (whatever it raised) failed its batch's callers, who retry their
        attempts; its removals are retried here, after a backoff that doubles up to
        `RETRY_MAX` (the API server may be away for a while) and is cut short by a new add.
        """
        failures = 0
        while True:
            if delay > 0 and not self._adds:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout=delay)
            self._wake.clear()
            failures = 0 if await self._flush() else failures + 1
            if not self._adds and not self._removes:
                return  # no await between this check and the end: no add can slip past
            delay = 0.0 if self._adds else _retry_delay(self.removal_delay, failures)

    async def _flush(self) -> bool:
        """Write the pending adds and removals as one patch: whether it was written."""
        async with self._lock:
            adds, removes, batch = self._adds, self._removes, self._batch
            self._adds, self._removes, self._batch = {}, set(), None
            if not adds and not removes:
                _resolve(batch, None)
                return True
            patch: dict[str, Any] = {"data": {**adds, **dict.fromkeys(removes)}}
            self.busy_since = asyncio.get_running_loop().time()
            if batch is not None:
                self._writing = dict.fromkeys(adds, batch)
            self._removing = removes
            try:
                await self._write(patch)
            except BaseException as exc:
                # Whatever it is (an API error, a bug, a cancellation), the batch's callers
                # are told: none of them may wait for ever on a write that is over.
                self._removes |= removes  # retried with the next flush; adds fail their callers
                self._dropped -= set(adds)
                error = JournalError(f"cannot record in-flight claims: {exc}")
                error.__cause__ = exc  # an outage stays one (`kube.is_unavailable`)
                _resolve(batch, error)
                if not isinstance(exc, Exception):
                    raise  # cancelled (a stop): the callers are told, the task ends
                _log_failure(exc, self.name)
                return False
            finally:
                self._writing, self._removing = {}, set()
            self._recorded |= set(adds)
            self._recorded -= removes
            _resolve(batch, None)
            if dropped := self._dropped & adds.keys():  # released while in flight: remove now
                self._removes |= dropped
                self._dropped -= dropped
                self._schedule(self.removal_delay)
            return True

    async def _write(self, patch: dict[str, Any]) -> None:
        self.writes += 1
        if self._exists is not False:
            try:
                await self.api.patch(
                    kube.CONFIGMAPS, self.name, patch, self.namespace, answer=False
                )
            except kube.NotFoundError:
                self._exists = False  # deleted by someone: create it again
            else:
                self._exists = True
                return
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "data": {k: v for k, v in patch["data"].items() if v is not None},
        }
        try:
            await self.api.create(kube.CONFIGMAPS, body, answer=False)
        except kube.ConflictError:  # created meanwhile (another flush, a previous leader)
            await self.api.patch(kube.CONFIGMAPS, self.name, patch, self.namespace, answer=False)
        self._exists = True


RETRY_MAX = 5.0
"""Seconds at most between two attempts to write a lane's pending removals."""


def _retry_delay(first: float, failures: int) -> float:
    """The wait before a lane's next write after `failures` failed ones in a row."""
    if failures <= 0:
        return first
    return min(max(first, 0.1) * 2.0 ** min(failures, 16), RETRY_MAX)


def _log_failure(exc: BaseException, lane: str) -> None:
    """A failed write: quietly while the API server is away (`kube.reachability` says so
    once), else a warning; a failure that is not an API error is a bug: with its traceback."""
    if kube.is_unavailable(exc):
        log.debug("journal_write_failed", lane=lane, error=str(exc))
    elif isinstance(exc, kube.KubeError):
        log.warning("journal_write_failed", lane=lane, error=str(exc))
    else:
        log.error("journal_write_failed", lane=lane, error=repr(exc), exc_info=exc)


def _resolve(batch: asyncio.Future[None] | None, error: BaseException | None) -> None:
    if batch is None or batch.done():
        return
    if error is None:
        batch.set_result(None)
    else:
        batch.set_exception(error)


def _retrieved(batch: asyncio.Future[None]) -> None:
    """Mark a batch's failure seen: its callers got it (callers cancelled meanwhile did not)."""
    if not batch.cancelled():
        batch.exception()
