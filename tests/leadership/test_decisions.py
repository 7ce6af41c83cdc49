"""The pure decisions of leader election, table-driven.

We test these aspects:
- MicroTime: six fractional digits, UTC, `Z`; parsing what client-go and others write;
- the Lease record read from and written to a Lease spec, field by field;
- expiry by the observer's own clock: a record unchanged for its duration has expired, and
  any change restarts the observation (clock skew does not matter);
- who may acquire: free, ours, expired; never a valid foreign one;
- the next record: creation, renewal (acquireTime and transitions kept), takeover
  (transitions + 1), taking a released Lease; the released record, only while it is ours;
- which answers leave a write in doubt (none, a 5xx) and which refuse it (a 4xx, a 409 above all);
- the watchdog: overdue only for a leader past its duration plus the tolerance;
- the holders as a person reads them: a Lease whose record was not seen is so, never free;
- the settings checks client-go makes; the written duration (rounded up);
- which roles run, from the loaded start-up handlers and the settings.
"""

from __future__ import annotations

import dataclasses
import datetime
import types

import pytest

from kopf_csi import leadership, leases
from kopf_csi.leases import LeaseRecord, Observation, Role
from kopf_csi.settings import (
    CapacitySettings,
    HealthMonitorOptions,
    LeaderElectionSettings,
    Settings,
)

UTC = datetime.UTC
T0 = datetime.datetime(2026, 11, 29, 10, 0, 0, 123456, tzinfo=UTC)
T1 = datetime.datetime(2026, 11, 29, 10, 0, 5, tzinfo=UTC)
ME = "replica-a"
OTHER = "csi-provisioner-0"


# -- MicroTime ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("moment", "text"),
    [
        pytest.param(T0, "2026-11-29T10:00:00.123456Z", id="micros"),
        pytest.param(T1, "2026-11-29T10:00:05.000000Z", id="whole-seconds-keep-six-digits"),
        pytest.param(
            datetime.datetime(
                2026, 11, 29, 12, 0, 5, tzinfo=datetime.timezone(datetime.timedelta(hours=2))
            ),
            "2026-11-29T10:00:05.000000Z",
            id="converted-to-utc",
        ),
    ],
)
def test_microtime_format(moment: datetime.datetime, text: str) -> None:
    assert leases.format_microtime(moment) == text


@pytest.mark.parametrize(
    ("text", "moment"),
    [
        ("2026-11-29T10:00:00.123456Z", T0),
        ("2026-11-29T10:00:05Z", T1),
        ("2026-11-29T12:00:05.000000+02:00", T1),
        ("", None),
        (None, None),
        ("yesterday", None),
    ],
)
def test_microtime_parse(text: str | None, moment: datetime.datetime | None) -> None:
    assert leases.parse_microtime(text) == moment


def test_microtime_round_trip() -> None:
    text = leases.format_microtime(T0)
    assert leases.parse_microtime(text) == T0


# -- the record --------------------------------------------------------------------------------


def test_record_from_a_go_written_lease() -> None:
    lease = {
        "spec": {
            "holderIdentity": OTHER,
            "leaseDurationSeconds": 15,
            "acquireTime": "2026-11-29T09:00:00.000000Z",
            "renewTime": "2026-11-29T10:00:00.123456Z",
            "leaseTransitions": 7,
        }
    }
    record = LeaseRecord.from_lease(lease)
    assert record == LeaseRecord(
        OTHER, 15, "2026-11-29T09:00:00.000000Z", "2026-11-29T10:00:00.123456Z", 7
    )
    assert record.spec() == lease["spec"]


def test_record_from_an_empty_lease() -> None:
    assert LeaseRecord.from_lease({}) == LeaseRecord()
    assert LeaseRecord.from_lease({"spec": {}}).holder == ""


def test_record_spec_omits_missing_times() -> None:
    assert LeaseRecord("x", 1).spec() == {
        "holderIdentity": "x", "leaseDurationSeconds": 1, "leaseTransitions": 0,
    }  # fmt: skip


# -- observation and expiry --------------------------------------------------------------------


def test_an_unchanged_record_keeps_its_observation_time() -> None:
    record = LeaseRecord(OTHER, 15, "a", "b", 0)
    first = leases.observe(None, record, 100.0)
    assert leases.observe(first, LeaseRecord(OTHER, 15, "a", "b", 0), 110.0) is first


def test_a_changed_record_restarts_the_observation() -> None:
    first = leases.observe(None, LeaseRecord(OTHER, 15, "a", "b", 0), 100.0)
    renewed = leases.observe(first, LeaseRecord(OTHER, 15, "a", "c", 0), 110.0)
    assert renewed.at == 110.0


@pytest.mark.parametrize(
    ("now", "expired"),
    [(100.0, False), (114.9, False), (115.0, True), (200.0, True)],
)
def test_expiry_counts_from_the_observation_by_our_clock(now: float, expired: bool) -> None:
    # The record's own renewTime is a day old: irrelevant, only our observation counts.
    record = LeaseRecord(OTHER, 15, "2026-11-28T10:00:00.000000Z", "2026-11-28T10:00:00.000000Z")
    assert leases.is_expired(Observation(record, 100.0), now) is expired


@pytest.mark.parametrize(
    ("record", "now", "allowed"),
    [
        pytest.param(LeaseRecord("", 1), 100.0, True, id="free"),
        pytest.param(LeaseRecord(ME, 15), 100.0, True, id="ours"),
        pytest.param(LeaseRecord(OTHER, 15), 100.0, False, id="foreign-valid"),
        pytest.param(LeaseRecord(OTHER, 15), 115.0, True, id="foreign-expired"),
        pytest.param(LeaseRecord(OTHER, 0), 100.0, True, id="foreign-zero-duration"),
    ],
)
def test_who_may_acquire(record: LeaseRecord, now: float, allowed: bool) -> None:
    assert leases.may_acquire(Observation(record, 100.0), ME, now) is allowed


def test_is_ours_needs_a_holder() -> None:
    assert not leases.is_ours(LeaseRecord("", 1), "")
    assert leases.is_free(LeaseRecord("", 1))
    assert not leases.is_free(LeaseRecord(ME, 1))


# -- the next record ---------------------------------------------------------------------------

STAMP0 = "2026-11-29T10:00:00.123456Z"
STAMP1 = "2026-11-29T10:00:05.000000Z"


@pytest.mark.parametrize(
    ("old", "expected"),
    [
        pytest.param(None, LeaseRecord(ME, 2, STAMP1, STAMP1, 0), id="create"),
        pytest.param(
            LeaseRecord(ME, 2, STAMP0, STAMP0, 3),
            LeaseRecord(ME, 2, STAMP0, STAMP1, 3),
            id="renew-keeps-acquire-time-and-transitions",
        ),
        pytest.param(
            LeaseRecord(OTHER, 15, STAMP0, STAMP0, 3),
            LeaseRecord(ME, 2, STAMP1, STAMP1, 4),
            id="takeover-counts-a-transition",
        ),
        pytest.param(
            LeaseRecord("", 1, STAMP0, STAMP0, 3),
            LeaseRecord(ME, 2, STAMP1, STAMP1, 4),
            id="released-lease-counts-a-transition",
        ),
        pytest.param(
            LeaseRecord(ME, 2, None, STAMP0, 0),
            LeaseRecord(ME, 2, STAMP1, STAMP1, 0),
            id="renew-without-acquire-time-sets-it",
        ),
    ],
)
def test_next_record(old: LeaseRecord | None, expected: LeaseRecord) -> None:
    assert leases.next_record(old, identity=ME, duration=2, now=T1) == expected


def test_released_record_is_client_gos() -> None:
    old = LeaseRecord(ME, 15, STAMP0, STAMP0, 3)
    assert leases.released_record(old, now=T1) == LeaseRecord("", 1, STAMP1, STAMP1, 3)


@pytest.mark.parametrize(
    ("old", "expected"),
    [
        pytest.param(LeaseRecord(ME, 15, STAMP0, STAMP1, 3), LeaseRecord("", 1, STAMP1, STAMP1, 3),
                     id="ours-is-released"),
        pytest.param(LeaseRecord(OTHER, 15, STAMP0, STAMP1, 4), None, id="taken-over-meanwhile"),
        pytest.param(LeaseRecord("", 1, STAMP0, STAMP0, 3), None, id="released-already"),
    ],
)  # fmt: skip
def test_release_of_only_what_is_ours(old: LeaseRecord, expected: LeaseRecord | None) -> None:
    assert leases.release_of(old, identity=ME, now=T1) == expected


@pytest.mark.parametrize(
    ("status", "refused"),
    [(409, True), (404, True), (422, True), (400, True), (500, False), (503, False),
     (504, False)],
)  # fmt: skip
def test_a_4xx_refuses_a_write_and_a_5xx_leaves_it_in_doubt(status: int, refused: bool) -> None:
    assert leases.is_refused(status) is refused


@pytest.mark.parametrize(
    ("seconds", "written"), [(15.0, 15), (1.5, 2), (0.2, 1), (2.0, 2), (14.001, 15)]
)
def test_written_duration_rounds_up(seconds: float, written: int) -> None:
    assert leases.duration_seconds(seconds) == written


# -- the watchdog ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("renewed_at", "now", "overdue"),
    [
        pytest.param(None, 1000.0, False, id="never-led"),
        pytest.param(100.0, 135.0, False, id="within-duration-plus-tolerance"),
        pytest.param(100.0, 135.1, True, id="past-duration-plus-tolerance"),
    ],
)
def test_renewal_overdue(renewed_at: float | None, now: float, overdue: bool) -> None:
    assert (
        leases.is_renewal_overdue(renewed_at, now, lease_duration=15.0, tolerance=20.0) is overdue
    )


# -- settings ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("holders", "text"),
    [
        pytest.param({"a": ME, "b": ME}, f"held by {ME}: a, b", id="leading"),
        pytest.param(
            {"a": OTHER, "b": None, "c": None},
            f"held by {OTHER}: a; not seen yet: b, c",
            id="standby-with-leases-not-seen",
        ),
        pytest.param({"a": ME, "b": "", "c": OTHER}, f"held by {ME}: a; free: b; held by"
                     f" {OTHER}: c", id="mixed"),
    ],
)  # fmt: skip
def test_holders_text(holders: dict[str, str | None], text: str) -> None:
    assert leases.holders_text(holders) == text


def test_go_defaults_are_valid() -> None:
    leases.validate(LeaderElectionSettings(enabled=True))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"lease_duration": 10.0}, "must be longer than the renew deadline"),
        ({"renew_deadline": 6.0}, "times the retry period"),
        ({"retry_period": 0.0}, "more than zero"),
    ],
)
def test_invalid_durations_are_named(changes: dict[str, float], message: str) -> None:
    # The settings refuse these too, as they are built; the Elector checks what it is given.
    config = types.SimpleNamespace(**{**dataclasses.asdict(LeaderElectionSettings()), **changes})
    with pytest.raises(ValueError, match=message):
        leases.validate(config)  # type: ignore[arg-type]


def test_default_identity_is_the_sanitized_host_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(leadership.socket, "gethostname", lambda: "node_1.example")
    assert leadership.default_identity("") == "node-1-example"
    assert leadership.default_identity("pod-a") == "pod-a"


# -- roles -------------------------------------------------------------------------------------

DEFAULTS = (
    "lifecycle.connect", "provisioner.start", "capacity.start", "attacher.start", "health.start",
)  # fmt: skip


@pytest.mark.parametrize(
    ("ids", "settings", "roles"),
    [
        pytest.param(
            DEFAULTS, Settings(), (Role.PROVISIONER, Role.ATTACHER, Role.HEALTH_MONITOR),
            id="defaults",
        ),
        pytest.param(
            DEFAULTS, Settings(health=HealthMonitorOptions(enabled=False)),
            (Role.PROVISIONER, Role.ATTACHER), id="health-monitor-disabled",
        ),
        pytest.param(
            ("lifecycle.connect", "attacher.start"), Settings(), (Role.ATTACHER,),
            id="attacher-only",
        ),
        pytest.param(
            ("capacity.start",), Settings(capacity=CapacitySettings(enabled=True)),
            (Role.PROVISIONER,), id="capacity-runs-under-the-provisioner",
        ),
        pytest.param(("capacity.start",), Settings(), (), id="capacity-off"),
        pytest.param(
            ("snapshotter.start", "resizer.start", "provisioner.start"), Settings(),
            (Role.PROVISIONER, Role.RESIZER, Role.SNAPSHOTTER), id="always-in-role-order",
        ),
        pytest.param(("lifecycle.connect", "my.start"), Settings(), (), id="no-controllers"),
    ],
)  # fmt: skip
def test_roles_from_loaded_handlers(
    ids: tuple[str, ...], settings: Settings, roles: tuple[Role, ...]
) -> None:
    assert leases.roles_for(ids, settings) == roles
