"""A write-ahead record of the claims whose CreateVolume may be running on the driver.

external-provisioner keeps these claims in memory only (`claimsInProgress`), so a restart while
a CreateVolume is running, or after one timed out, forgets a claim that was deleted meanwhile,
and its backend volume leaks (its open issue #486). We record each claim in a ConfigMap before
calling CreateVolume and drop it once the outcome is known (the PV saved, or a final error).
After a restart, a recorded claim that no longer exists is provisioned to the end anyway: the
PV is created for the deleted claim, the controller manager marks it Released, and the normal
deletion path removes the backend volume (or keeps it, visibly, under Retain).

Cost: writes are group-committed. Every claim waiting to be recorded within one flush shares a
single JSON merge patch, and removals ride along with the next flush (or go out after a short
delay), so a burst of claims costs a fraction of a write per claim and a lone claim about one.
A claim is never sent to the driver before its record is durable: a failed write fails the
attempt (and it is retried), which is the safe side.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Mapping
from typing import Any

import structlog

from kopf_csi import kube

__all__ = ["Journal", "JournalError", "journal_name", "snapshot_of"]

log = structlog.get_logger("kopf_csi.journal")
Body = Mapping[str, Any]


class JournalError(RuntimeError):
    """The record could not be written; CreateVolume must not be called yet."""


def journal_name(driver_name: str) -> str:
    """`kopf-csi-inflight-<driver>`, sanitised like the Go sidecars' lease names."""
    safe = "".join(c if c.isalnum() or c == "-" else "-" for c in driver_name.lower())
    return f"kopf-csi-inflight-{safe}".rstrip("-")[:253]


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


class Journal:
    """The in-flight claims of one driver, in one ConfigMap (keys: claim UIDs)."""

    def __init__(
        self,
        api: kube.KubeClient,
        *,
        namespace: str,
        name: str,
        removal_delay: float = 0.1,
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.name = name
        self.removal_delay = removal_delay
        self.writes = 0
        self.waited = 0.0
        """Seconds callers of `record` waited for their record to be durable, in all."""
        self.records = 0
        self._adds: dict[str, str] = {}
        self._removes: set[str] = set()
        self._waiters: list[asyncio.Future[None]] = []
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
                claims[uid] = json.loads(raw)
            except ValueError:
                log.warning("journal_entry_unreadable", uid=uid)
        self._recorded = set(claims)
        return claims

    async def record(self, claim: Body) -> None:
        """Return once the claim is durably recorded (raise JournalError if it cannot be)."""
        uid = str(claim["metadata"]["uid"])
        if uid in self._recorded and uid not in self._removes:
            return
        self._removes.discard(uid)
        self._adds[uid] = json.dumps(snapshot_of(claim), separators=(",", ":"), sort_keys=True)
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()
        self._waiters.append(waiter)
        self._schedule(0.0)
        started = loop.time()
        try:
            await waiter
        finally:
            self.records += 1
            self.waited += loop.time() - started

    def release(self, uid: str) -> None:
        """The outcome is known: drop the record with the next flush (no waiting)."""
        if self._adds.pop(uid, None) is not None and uid not in self._recorded:
            return
        if uid in self._recorded:
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
            self._flusher = asyncio.create_task(self._flush_loop(delay))
        elif self._adds:
            self._wake.set()  # a claim is waiting: cut the removals' delay short

    async def _flush_loop(self, delay: float) -> None:
        """Flush until nothing is pending; adds go at once, removals after a short delay."""
        while True:
            if delay > 0 and not self._adds:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout=delay)
            self._wake.clear()
            await self._flush()
            if not self._adds and not self._removes:
                return  # no await between this check and the end: no add can slip past
            delay = 0.0 if self._adds else self.removal_delay

    async def _flush(self) -> None:
        async with self._lock:
            adds, removes, waiters = self._adds, self._removes, self._waiters
            self._adds, self._removes, self._waiters = {}, set(), []
            if not adds and not removes:
                _resolve(waiters, None)
                return
            patch: dict[str, Any] = {"data": {**adds, **dict.fromkeys(removes)}}
            try:
                await self._write(patch)
            except kube.KubeError as exc:
                log.warning("journal_write_failed", error=str(exc))
                self._removes |= removes  # retried with the next flush; adds fail their callers
                _resolve(waiters, JournalError(f"cannot record in-flight claims: {exc}"))
                return
            self._recorded |= set(adds)
            self._recorded -= removes
            _resolve(waiters, None)

    async def _write(self, patch: dict[str, Any]) -> None:
        self.writes += 1
        if self._exists is not False:
            try:
                await self.api.patch(kube.CONFIGMAPS, self.name, patch, self.namespace)
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
            await self.api.create(kube.CONFIGMAPS, body)
        except kube.ConflictError:  # created meanwhile (another flush, a previous leader)
            await self.api.patch(kube.CONFIGMAPS, self.name, patch, self.namespace)
        self._exists = True


def _resolve(waiters: list[asyncio.Future[None]], error: BaseException | None) -> None:
    for waiter in waiters:
        if not waiter.done():
            if error is None:
                waiter.set_result(None)
            else:
                waiter.set_exception(error)
