"""The Lease record and the pure decisions of leader election (client-go's LeaseLock).

What lives here decides, from values alone, without touching the API or the clock:
- the roles (`Role`, in acquisition order) and which of them this operator runs (`roles_for`),
  from the loaded start-up handlers (`ROLE_HANDLERS`) and the settings that switch some off;
- the settings checks client-go's `NewLeaderElector` makes (`validate`);
- the record: client-go's `holderIdentity`, `leaseDurationSeconds`, `acquireTime`, `renewTime`
  (MicroTime) and `leaseTransitions`, read from and written to a Lease (`LeaseRecord`,
  `lease_body`), and the MicroTime text form;
- expiry by the observer's own clock (`Observation`, client-go's `observedTime`: a record
  unchanged for its `leaseDurationSeconds` has expired, so clock skew does not matter), who
  may acquire, the record to write to acquire, renew, take over or release, and the watchdog;
- how a replica's view of the holders reads to a person (`holders_text`: the health check's
  detail, explain's line about the operator);
- what a write's answer tells (`is_refused`: a 4xx was not applied; no answer or a 5xx leaves
  the write in doubt) and how often a write beaten by another one is tried again at once
  (`CONFLICT_RETRIES`).

`leadership` does the I/O with these: `Candidate` (one Lease) and `Elector` (all of them).
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import math
from collections.abc import Iterable, Mapping
from typing import Any

from kopf_csi import names
from kopf_csi.settings import LeaderElectionSettings, Settings

__all__ = [
    "CONFLICT_RETRIES",
    "HEALTH_TOLERANCE",
    "JITTER",
    "ROLE_HANDLERS",
    "LeaseRecord",
    "Observation",
    "Role",
    "duration_seconds",
    "format_microtime",
    "holders_text",
    "is_expired",
    "is_free",
    "is_ours",
    "is_refused",
    "is_renewal_overdue",
    "lease_body",
    "may_acquire",
    "next_record",
    "observe",
    "parse_microtime",
    "release_of",
    "released_record",
    "roles_for",
    "validate",
]

Body = dict[str, Any]
HEALTH_TOLERANCE = 20.0
"""csi-lib-utils `DefaultHealthCheckTimeout`: how long past its lease duration a leader that
has not renewed may still call itself healthy (the `/healthz/leader-election` watchdog)."""
JITTER = 1.2  # client-go's JitterFactor for acquisition attempts
CONFLICT_RETRIES = 3
"""How many times a Lease write answered 409 is read, decided and written again at once (within
the attempt's time): the Lease changed since we read it, most often by our own earlier write
whose answer we never got (cut off by a timeout or by the stop)."""


class Role(enum.Enum):
    """A Go sidecar whose job we do; the order is the order of acquisition."""

    PROVISIONER = names.LEASE_PREFIX_PROVISIONER
    ATTACHER = names.LEASE_PREFIX_ATTACHER
    RESIZER = names.LEASE_PREFIX_RESIZER
    SNAPSHOTTER = names.LEASE_PREFIX_SNAPSHOTTER
    HEALTH_MONITOR = names.LEASE_PREFIX_HEALTH_MONITOR

    def lease_name(self, driver_name: str) -> str:
        return names.lease_name(self.value, driver_name)

    @property
    def manager(self) -> str:
        """The Go sidecar's field manager: its Lease writes show up under that name."""
        return _MANAGERS[self]


_MANAGERS: Mapping[Role, str] = {
    Role.PROVISIONER: names.MANAGER_PROVISIONER,
    Role.ATTACHER: names.MANAGER_ATTACHER,
    Role.RESIZER: names.MANAGER_RESIZER,
    Role.SNAPSHOTTER: names.MANAGER_SNAPSHOTTER,
    Role.HEALTH_MONITOR: names.MANAGER_HEALTH_MONITOR,
}


ROLE_HANDLERS: Mapping[str, Role] = {
    "provisioner.start": Role.PROVISIONER,
    "capacity.start": Role.PROVISIONER,  # the capacity controller runs inside the provisioner
    "attacher.start": Role.ATTACHER,
    "resizer.start": Role.RESIZER,
    "snapshotter.start": Role.SNAPSHOTTER,
    "health.start": Role.HEALTH_MONITOR,
}
"""Start-up handler id → the role (and Lease) its module takes over from a Go sidecar."""


def roles_for(handler_ids: Iterable[str], settings: Settings) -> tuple[Role, ...]:
    """The roles this operator runs, in acquisition order: loaded modules, minus disabled ones."""
    off = set()
    if not settings.capacity.enabled:
        off.add("capacity.start")
    if not settings.health.enabled:
        off.add("health.start")
    wanted = {ROLE_HANDLERS[hid] for hid in handler_ids if hid in ROLE_HANDLERS and hid not in off}
    return tuple(role for role in Role if role in wanted)


def validate(config: LeaderElectionSettings) -> None:
    """client-go's `NewLeaderElector` checks; ValueError names the offending setting."""
    if min(config.lease_duration, config.renew_deadline, config.retry_period) <= 0:
        raise ValueError("leader election durations must be more than zero")
    if config.lease_duration <= config.renew_deadline:
        raise ValueError(
            f"the lease duration ({config.lease_duration:g}s) must be longer than the renew"
            f" deadline ({config.renew_deadline:g}s)"
        )
    if config.renew_deadline <= JITTER * config.retry_period:
        raise ValueError(
            f"the renew deadline ({config.renew_deadline:g}s) must be longer than"
            f" {JITTER:g} times the retry period ({config.retry_period:g}s)"
        )


# -- the record --------------------------------------------------------------------------------


def format_microtime(moment: datetime.datetime) -> str:
    """metav1.MicroTime's JSON form: RFC 3339, UTC, always six fractional digits."""
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_microtime(text: str | None) -> datetime.datetime | None:
    """A MicroTime (or a plain RFC 3339 time) as an aware datetime; None if absent or invalid."""
    if not text:
        return None
    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=datetime.UTC)


def duration_seconds(lease_duration: float) -> int:
    """The `leaseDurationSeconds` we write: whole seconds, rounded up, at least 1."""
    return max(1, math.ceil(lease_duration))


@dataclasses.dataclass(frozen=True)
class LeaseRecord:
    """client-go's LeaderElectionRecord, as it lives in a Lease's spec."""

    holder: str = ""
    duration: int = 0
    acquire_time: str | None = None
    renew_time: str | None = None
    transitions: int = 0

    @classmethod
    def from_lease(cls, lease: Mapping[str, Any]) -> LeaseRecord:
        spec = lease.get("spec") or {}
        return cls(
            holder=str(spec.get("holderIdentity") or ""),
            duration=int(spec.get("leaseDurationSeconds") or 0),
            acquire_time=spec.get("acquireTime"),
            renew_time=spec.get("renewTime"),
            transitions=int(spec.get("leaseTransitions") or 0),
        )

    def spec(self) -> Body:
        """The Lease spec client-go's `LeaderElectionRecordToLeaseSpec` writes."""
        spec: Body = {
            "holderIdentity": self.holder,
            "leaseDurationSeconds": self.duration,
            "leaseTransitions": self.transitions,
        }
        if self.acquire_time is not None:
            spec["acquireTime"] = self.acquire_time
        if self.renew_time is not None:
            spec["renewTime"] = self.renew_time
        return spec


def lease_body(name: str, namespace: str, record: LeaseRecord, base: Mapping[str, Any]) -> Body:
    """The Lease to write: `base`'s metadata (its resourceVersion guards the PUT), our record."""
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": dict(base.get("metadata") or {"name": name, "namespace": namespace}),
        "spec": record.spec(),
    }


# -- the decisions -----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Observation:
    """A record and the moment (our monotonic clock) we first saw it: client-go's observedTime."""

    record: LeaseRecord
    at: float


def observe(previous: Observation | None, record: LeaseRecord, now: float) -> Observation:
    """Keep the old observation time while the record is unchanged; restart it on any change."""
    if previous is not None and previous.record == record:
        return previous
    return Observation(record, now)


def is_free(record: LeaseRecord) -> bool:
    return not record.holder


def is_ours(record: LeaseRecord, identity: str) -> bool:
    return bool(record.holder) and record.holder == identity


def is_expired(observation: Observation, now: float) -> bool:
    """Unchanged for its own `leaseDurationSeconds` by our clock (client-go `isLeaseValid`)."""
    return now >= observation.at + observation.record.duration


def may_acquire(observation: Observation, identity: str, now: float) -> bool:
    """Free, ours already, or not renewed in time by its holder."""
    record = observation.record
    return is_free(record) or is_ours(record, identity) or is_expired(observation, now)


def next_record(
    old: LeaseRecord | None, *, identity: str, duration: int, now: datetime.datetime
) -> LeaseRecord:
    """What we write to acquire or renew: a renewal keeps acquireTime and the transitions."""
    stamp = format_microtime(now)
    if old is not None and is_ours(old, identity):
        acquired, transitions = old.acquire_time or stamp, old.transitions
    else:
        acquired, transitions = stamp, (0 if old is None else old.transitions + 1)
    return LeaseRecord(identity, duration, acquired, stamp, transitions)


def released_record(old: LeaseRecord, *, now: datetime.datetime) -> LeaseRecord:
    """client-go `release()`: no holder, 1 s, both times now, the transitions kept."""
    stamp = format_microtime(now)
    return LeaseRecord("", 1, stamp, stamp, old.transitions)


def release_of(record: LeaseRecord, *, identity: str, now: datetime.datetime) -> LeaseRecord | None:
    """The released record to write while the Lease is ours; None when it is not (any more)."""
    return released_record(record, now=now) if is_ours(record, identity) else None


def is_refused(status: int) -> bool:
    """A 4xx answer: the write was not applied. A 5xx may come after it was (a 504, say)."""
    return 400 <= status < 500


def is_renewal_overdue(
    renewed_at: float | None, now: float, *, lease_duration: float, tolerance: float
) -> bool:
    """The watchdog: a leader that has not renewed for its lease duration plus the tolerance."""
    return renewed_at is not None and now - renewed_at > lease_duration + tolerance


def holders_text(holders: Mapping[str, str | None]) -> str:
    """Who holds which Lease, as a replica last saw them (`Elector.holders`: "" free, None no
    record seen), grouped by holder: `held by vm: a, b; not seen yet: c`.

    A Lease whose record the replica has not seen (none exists yet, or reading it failed) is
    said to be so, never to be free or held by nobody.
    """
    groups: dict[str, list[str]] = {}
    for name, holder in holders.items():
        key = "not seen yet" if holder is None else f"held by {holder}" if holder else "free"
        groups.setdefault(key, []).append(name)
    return "; ".join(f"{key}: {', '.join(leases)}" for key, leases in groups.items())
