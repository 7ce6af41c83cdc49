"""Leader election on coordination.k8s.io Leases, compatible with client-go's LeaseLock.

Two replicas run active/passive: only the holder of the Leases works. One kopf-csi operator
does the jobs of several Go sidecars, so it holds the Lease of every role it runs, under the
Go sidecars' own names (`names.lease_name`), and a Go sidecar of the same role left running
during a migration stays passive, and the other way round. Which roles run follows from the
loaded handler modules: each controller module's start-up handler id names its role
(`ROLE_HANDLERS`), gated by the settings that switch it off.

The Lease record is client-go's (`tryAcquireOrRenew`): `holderIdentity`, `leaseDurationSeconds`,
`acquireTime`, `renewTime` (MicroTime) and `leaseTransitions`. A Lease is expired when its
record has not changed for `leaseDurationSeconds` *by the observer's own clock* (client-go's
`observedTime`), so clock skew between replicas does not matter. Writes are PUTs guarded by the
resourceVersion. A conflict (409) says only that the Lease changed since we read it: someone
else wrote first, or our own earlier write landed after all, its answer cut off by a timeout or
by the stop. Either way we read it again and decide again at once (`CONFLICT_RETRIES` times at
most, within the attempt's time), for every write: acquire, renew, create and release. A write
without an answer leaves the Candidate `in_doubt`: a release reads the Lease before deciding.

Differences from client-go, each on the safe side:
- several Leases are acquired one by one in a fixed order (`Role` order), so two kopf-csi
  replicas never deadlock holding one Lease each; a replica is the leader once it holds all;
- the leader gives up when a renewal has not succeeded for `renew_deadline` (client-go: a
  renewal round that fails for `renew_deadline`, up to `retry_period` later), or at once when
  another holder shows up in the record;
- the written `leaseDurationSeconds` is rounded up (client-go truncates): others never take
  over before our own deadline has passed;
- on a clean shutdown the Leases are released (client-go's ReleaseOnCancel, the sidecars'
  alpha ReleaseLeaderElectionOnExit gate): holder "" and 1 s, so a standby takes over at once.
  Renewing stops first, and a round in flight is let finish rather than cut off; a release
  that meets a 409 reads the Lease and releases it again while it is still ours (client-go
  tries once, and leaves the Lease to expire).

This module holds the I/O: `Candidate` (one Lease) and `Elector` (all of them) read and write
Leases through `kube.KubeClient` and post the leadership events. The record and every pure
decision live in `leases`; their names stay importable from here. Nothing here imports kopf:
`runtime.lead` wires it to the memo.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import random
import socket
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from typing import Any

import structlog

from kopf_csi import events, kube, names
from kopf_csi.leases import (
    CONFLICT_RETRIES,
    HEALTH_TOLERANCE,
    JITTER,
    ROLE_HANDLERS,
    LeaseRecord,
    Observation,
    Role,
    duration_seconds,
    format_microtime,
    holders_text,
    is_expired,
    is_free,
    is_ours,
    is_refused,
    is_renewal_overdue,
    lease_body,
    may_acquire,
    next_record,
    observe,
    parse_microtime,
    release_of,
    released_record,
    roles_for,
    validate,
)
from kopf_csi.settings import LeaderElectionSettings

__all__ = [
    "HEALTH_TOLERANCE",
    "JITTER",
    "ROLE_HANDLERS",
    "Candidate",
    "Elector",
    "LeaseRecord",
    "Observation",
    "Role",
    "default_identity",
    "duration_seconds",
    "format_microtime",
    "is_expired",
    "is_free",
    "is_ours",
    "is_renewal_overdue",
    "may_acquire",
    "next_record",
    "observe",
    "parse_microtime",
    "released_record",
    "roles_for",
    "validate",
]

log = structlog.get_logger("kopf_csi.leadership")

Body = dict[str, Any]
API_ERRORS = kube.REQUEST_ERRORS
"""What a Lease request may raise: an answer with an error, or none (a refused connection, a
reset). A failed attempt, never the end of the renewal loop: a leader whose loop died would
go on working, unrenewed, after a standby took its Leases over."""


def default_identity(identity: str = "") -> str:
    """The holder identity: the configured one or the host name, sanitized as csi-lib-utils does."""
    return names.sanitize_lease_name(identity or socket.gethostname())


# -- I/O: one Lease ----------------------------------------------------------------------------


class Candidate:
    """Acquires, renews and releases one Lease (client-go's `tryAcquireOrRenew`, `release`)."""

    def __init__(
        self,
        api: kube.KubeClient,
        *,
        name: str,
        namespace: str,
        identity: str,
        duration: int,
        clock: Callable[[], float] = time.monotonic,
        wallclock: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
    ) -> None:
        self.api = api
        self.name = name
        self.namespace = namespace
        self.identity = identity
        self.duration = duration
        self.clock = clock
        self.wallclock = wallclock
        self.observation: Observation | None = None
        self.lease: Body | None = None  # the last object we saw or wrote (its resourceVersion)
        self.renewed_at: float | None = None  # our clock, at the last successful write
        self.in_doubt = False  # a write went out, and no answer said it was not applied

    @property
    def holder(self) -> str | None:
        """The holder in the last record seen: "" when free, None before the first look."""
        return None if self.observation is None else self.observation.record.holder

    @property
    def held(self) -> bool:
        return self.observation is not None and is_ours(self.observation.record, self.identity)

    async def attempt(self, *, timeout: float) -> bool:
        """One try to acquire or renew, bounded by `timeout`; False if not ours (yet)."""
        try:
            async with asyncio.timeout(max(timeout, 0.001)):
                return await self._try()
        except TimeoutError:
            log.warning("lease_attempt_timed_out", lease=self.name, timeout=timeout)
        except API_ERRORS as exc:
            log.warning("lease_attempt_failed", lease=self.name, error=str(exc) or repr(exc))
        return False

    async def look(self, *, timeout: float) -> None:
        """Read the Lease and observe its record, writing nothing (a standby watching a Lease
        it does not try for yet); a failure only leaves the last observation as it was."""
        try:
            async with asyncio.timeout(max(timeout, 0.001)):
                await self._read()
        except TimeoutError:
            log.warning("lease_read_timed_out", lease=self.name, timeout=timeout)
        except API_ERRORS as exc:
            log.warning("lease_read_failed", lease=self.name, error=str(exc) or repr(exc))

    async def _try(self) -> bool:
        if self.held and self.lease is not None:
            # client-go's fast path: renew with the object we wrote last; on any error (409
            # when someone else wrote), fall through to reading the Lease.
            with contextlib.suppress(kube.KubeError):
                return await self._write(self.lease, self.observation)
        return await self._guarded(self._acquire_or_renew, await self._read())

    async def _acquire_or_renew(self, lease: Body | None) -> bool:
        if lease is None:
            record = next_record(
                None, identity=self.identity, duration=self.duration, now=self.wallclock()
            )
            body = lease_body(self.name, self.namespace, record, {})
            created = await self._send(self.api.create(kube.LEASES, body))
            self._seen(created, record, self.clock(), written=True)
            return True
        if self.observation is None or not may_acquire(
            self.observation, self.identity, self.clock()
        ):
            return False
        return await self._write(lease, self.observation)

    async def _write(self, lease: Body, observation: Observation | None) -> bool:
        old = None if observation is None else observation.record
        record = next_record(
            old, identity=self.identity, duration=self.duration, now=self.wallclock()
        )
        updated = await self._send(
            self.api.replace(kube.LEASES, lease_body(self.name, self.namespace, record, lease))
        )
        if old is not None and not is_ours(old, self.identity):
            log.info(
                "lease_taken_over", lease=self.name, previous=old.holder or None,
                transitions=record.transitions,
            )  # fmt: skip
        self._seen(updated, record, self.clock(), written=True)
        return True

    async def _read(self) -> Body | None:
        """The Lease as it is now (None if there is none); observed, and kept as our base."""
        lease = await self.api.get(kube.LEASES, self.name, self.namespace)
        if lease is not None:
            record = LeaseRecord.from_lease(lease)
            self.observation = observe(self.observation, record, self.clock())
            self.lease = lease
        return lease

    async def _send(self, write: Coroutine[Any, Any, Body]) -> Body:
        """One Lease write, `in_doubt` until its answer says whether it was applied."""
        self.in_doubt = True
        try:
            answer = await write
        except kube.KubeError as exc:
            self.in_doubt = not is_refused(exc.status)
            raise
        self.in_doubt = False
        return answer

    async def _guarded(
        self, step: Callable[[Body | None], Awaitable[bool]], lease: Body | None
    ) -> bool:
        """`step` decides from `lease` and writes; after a 409, it decides again on a fresh read.

        The write is guarded by the resourceVersion of `lease`, so a 409 says only that the Lease
        changed since: often by our own write whose answer we never got (cut off by a timeout or
        by the stop), which landed after all. `CONFLICT_RETRIES` times at most: then it raises.
        """
        retries = 0
        while True:
            try:
                return await step(lease)
            except kube.ConflictError as exc:
                if retries >= CONFLICT_RETRIES:
                    raise
                retries += 1
                log.info("lease_conflict_retried", lease=self.name, retry=retries, error=str(exc))
            lease = await self._read()

    def _seen(self, lease: Body, record: LeaseRecord, now: float, *, written: bool) -> None:
        self.lease = lease
        self.observation = Observation(record, now)
        if written:
            self.renewed_at = now

    async def release(self, *, timeout: float) -> bool:
        """Give the Lease up while it is ours (a standby may take it at once), within `timeout`.

        After a write whose answer never came (`in_doubt`), the Lease is read first: that write
        may have made it ours, or changed its resourceVersion. A 409 reads it again and releases
        it again while it is still ours (`_guarded`). Otherwise it expires by itself.
        """
        if not self.in_doubt and (not self.held or self.lease is None):
            return True
        try:
            async with asyncio.timeout(max(timeout, 0.001)):
                lease = await self._read() if self.in_doubt else self.lease
                released = await self._guarded(self._release, lease)
        except (*API_ERRORS, TimeoutError) as exc:  # expires by itself then
            log.warning("lease_not_released", lease=self.name, error=str(exc) or repr(exc))
            return False
        if released:
            log.info("lease_released", lease=self.name)
        return True

    async def _release(self, lease: Body | None) -> bool:
        """Write client-go's released record if `lease` is ours; False if it is not (any more)."""
        if lease is None:
            return False
        now = self.wallclock()
        record = release_of(LeaseRecord.from_lease(lease), identity=self.identity, now=now)
        if record is None:
            return False
        body = lease_body(self.name, self.namespace, record, lease)
        released = await self._send(self.api.replace(kube.LEASES, body))
        self._seen(released, record, self.clock(), written=False)
        return True


# -- I/O: every Lease of this operator ---------------------------------------------------------


class Elector:
    """Holds every Lease of this operator, or waits for them; reports losing any of them.

    The metrics endpoint reads the plain attributes: `is_leader`, `leases`, `holders`, `lost`.
    """

    def __init__(
        self,
        api: kube.KubeClient,
        *,
        leases: Sequence[str],
        namespace: str,
        identity: str,
        config: LeaderElectionSettings,
        on_lost: Callable[[str], Coroutine[Any, Any, None]] | None = None,
        observers: Sequence[Callable[[str, bool], object]] = (),
        clock: Callable[[], float] = time.monotonic,
        managers: Mapping[str, str] | None = None,  # Lease name → field manager of its writes
    ) -> None:
        validate(config)
        if not leases:
            raise ValueError("leader election needs at least one Lease")
        self.config = config
        self.identity = names.sanitize_lease_name(identity)
        self.namespace = namespace
        self.clock = clock
        self.on_lost = on_lost
        self.observers = tuple(observers)  # (lease, leading): e.g. the leader gauge of metrics
        identity, duration = self.identity, duration_seconds(config.lease_duration)
        managers = managers or {}
        self.candidates = tuple(
            Candidate(
                # Its own token bucket per role, as each Go sidecar's own client for it.
                api.as_manager(managers[n]).for_leader_election() if n in managers else api,
                name=n,
                namespace=namespace,
                identity=identity,
                duration=duration,
            )
            for n in leases
        )
        for candidate in self.candidates:
            candidate.clock = clock
        self.api = api
        self.is_leader = False
        self.lost: str | None = None  # why leadership was lost, once it was
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()  # set by `stop()`: no renewal starts after it
        self._lost_task: asyncio.Task[None] | None = None
        self._holders_logged: dict[str, str | None] = {}

    @property
    def leases(self) -> tuple[str, ...]:
        return tuple(candidate.name for candidate in self.candidates)

    @property
    def holders(self) -> dict[str, str | None]:
        """Each Lease's holder as last seen ("" free, None not seen yet)."""
        return {candidate.name: candidate.holder for candidate in self.candidates}

    async def acquire(self) -> None:
        """Wait, as long as it takes, until this replica holds every Lease; then lead."""
        log.info("leader_election_started", leases=self.leases, identity=self.identity)
        self._report(leading=False)
        while not await self._round():
            self._log_holders()
            pause = self.config.retry_period * (1 + random.random() * JITTER)
            await asyncio.sleep(pause)
        self.is_leader = True
        self._report(leading=True)
        log.info("leader_elected", leases=self.leases, identity=self.identity)
        await self._post(names.LEASE_EVENT_BECAME_LEADER)

    async def _round(self) -> bool:
        """One attempt at each Lease, in order, up to the first we cannot have.

        The Leases after that one are only read, all at once and within one retry period: their
        records are observed, so that their expiry is being timed meanwhile. After a leader's
        crash (no release), all of its Leases then expire together, one lease duration after
        it stopped, not one lease duration after another (75 s for five roles).
        """
        for index, candidate in enumerate(self.candidates):
            if not await candidate.attempt(timeout=self.config.renew_deadline):
                later = self.candidates[index + 1 :]
                if later:
                    timeout = self.config.retry_period
                    await asyncio.gather(*(c.look(timeout=timeout) for c in later))
                return False
        return True

    def start(self) -> None:
        """Keep renewing in the background; call `on_lost` once if any renewal runs late."""
        self._task = asyncio.create_task(self._renew_forever(), name="leader-election")

    async def _renew_forever(self) -> None:
        reason = None
        while reason is None:
            if await self._stopping_within(self.config.retry_period):
                return  # a clean stop: `stop()` releases the Leases, from what we wrote last
            reason = await self._renew_round()
        self.is_leader = False
        self.lost = reason
        self._report(leading=False)
        log.error("leader_election_lost", reason=reason, identity=self.identity)
        if self.on_lost is not None and not self._stopping.is_set():
            # A task of its own: `on_lost` stops the work, which includes `stop()` of ours.
            self._lost_task = asyncio.create_task(self.on_lost(reason), name="leadership-lost")
        await self._post(names.LEASE_EVENT_STOPPED_LEADING)

    async def _stopping_within(self, delay: float) -> bool:
        """Wait `delay`, or less if `stop()` comes meanwhile; True once it has come."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(delay):
                await self._stopping.wait()
        return self._stopping.is_set()

    async def _renew_round(self) -> str | None:
        """Renew every Lease; the reason to give up, or None while all are ours."""
        deadline = self.config.renew_deadline
        for candidate in self.candidates:
            last = candidate.renewed_at if candidate.renewed_at is not None else self.clock()
            ok = await candidate.attempt(timeout=last + deadline - self.clock())
            if not ok and candidate.holder and not candidate.held:
                return f"Lease {self.namespace}/{candidate.name} is held by {candidate.holder!r}"
        now = self.clock()
        for candidate in self.candidates:
            if candidate.renewed_at is None or now - candidate.renewed_at > deadline:
                return (
                    f"failed to renew Lease {self.namespace}/{candidate.name}"
                    f" within the renew deadline of {deadline:g}s"
                )
        return None

    async def stop(self, *, release: bool = True) -> None:
        """Stop renewing, then (unless lost) release the Leases: run once the work has stopped.

        A renewal round in flight is let finish (its attempts are bounded by the renew
        deadline): cut off, its PUT could still land after our release read the Lease, and
        the release would meet a 409. Only a round that overruns is cancelled.
        """
        self._stopping.set()
        task, self._task = self._task, None
        if task is not None and task is not asyncio.current_task():
            bound = self.config.renew_deadline + self.config.retry_period  # the round, its event
            try:
                await asyncio.wait({task}, timeout=bound)
            finally:
                task.cancel()  # nothing to cancel when it has ended
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        was_leader, self.is_leader = self.is_leader, False
        self._report(leading=False)
        if release and self.lost is None:
            for candidate in reversed(self.candidates):
                await candidate.release(timeout=self.config.renew_deadline)
            if was_leader:
                await self._post(names.LEASE_EVENT_STOPPED_LEADING)

    def check(self) -> tuple[bool, str]:
        """Health (`memo.health_checks["leader-election"]`): False when renewals are overdue."""
        if not self.is_leader and self.lost is None:
            return True, f"standby as {self.identity}: {holders_text(self.holders)}"
        now = self.clock()
        for candidate in self.candidates:
            if is_renewal_overdue(
                candidate.renewed_at, now,
                lease_duration=self.config.lease_duration, tolerance=HEALTH_TOLERANCE,
            ):  # fmt: skip
                return False, f"failed election to renew leadership on lease {candidate.name}"
        if self.lost is not None:
            return True, f"stopping: {self.lost}"
        return True, f"leading as {self.identity}: {', '.join(self.leases)}"

    def _report(self, *, leading: bool) -> None:
        for observer in self.observers:
            for name in self.leases:
                try:
                    observer(name, leading)
                except Exception as exc:  # metrics must never break the election
                    log.warning("leadership_observer_failed", error=repr(exc))

    def _log_holders(self) -> None:
        """Say who holds what, once per change (client-go's OnNewLeader)."""
        holders = self.holders
        if holders != self._holders_logged:
            self._holders_logged = holders
            log.info(
                "leader_election_waiting", identity=self.identity,
                holders={name: holder for name, holder in holders.items() if holder is not None},
                not_seen=[name for name, holder in holders.items() if holder is None],
            )  # fmt: skip

    async def _post(self, template: str) -> None:
        """client-go's LeaseLock `RecordEvent`: a Normal event on each Lease (best effort).

        Bounded by the retry period: an API that does not answer must not hold up the work.
        """
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.config.retry_period):
                await self._post_all(template)

    async def _post_all(self, template: str) -> None:
        recorders = []
        for candidate in self.candidates:
            if candidate.lease is None:
                continue
            component = names.LEASE_EVENT_COMPONENT.format(
                lease=candidate.name, identity=self.identity
            )
            recorder = events.Recorder(candidate.api, component=component)
            message = template.format(identity=self.identity)
            await recorder.post(
                candidate.lease, type_=events.NORMAL, reason=names.LEASE_EVENT_REASON,
                message=message,
            )  # fmt: skip
            recorders.append(recorder)
        for recorder in recorders:
            await recorder.flush()
