"""What kubernetes-asyncio's own leader election lacks, pinned (docs/leader-election.md, "Why
our own"): an upgrade that changes one of these fails here, and the table there is due again.

We test these aspects, on `kubernetes_asyncio.leaderelection` with a fake lock (no API):
- one lock per election, and no release anywhere;
- a transport error escapes `run()`, and the leader's work goes on: never cancelled, never told;
- a 409 (any failed write) waits a retry period: no re-read at once;
- the record: local time written as UTC (`Z`), no leaseTransitions, a float duration refused;
- the Lease writes name no field manager;
- a renewal reads before it writes (two requests), and finds a foreign holder without giving up.
"""

from __future__ import annotations

import asyncio
import datetime
import inspect
import os
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.leaderelection import electionconfig, leaderelection
from kubernetes_asyncio.leaderelection.leaderelectionrecord import LeaderElectionRecord
from kubernetes_asyncio.leaderelection.resourcelock import baselock, leaselock

Record = LeaderElectionRecord


class FakeLock(baselock.BaseLock):
    """A Lease in memory; `refuse` makes writes fail as an ApiException does."""

    def __init__(self, record: Record | None = None, *, unreachable_after: int | None = None):
        super().__init__("lease", "default", "me")
        self.record = record
        self.calls: list[str] = []
        self.unreachable_after = unreachable_after
        self.refuse = False
        self.updated_twice = asyncio.Event()

    async def get(self, name: str, namespace: str) -> Any:
        self.calls.append("get")
        if self.unreachable_after is not None and len(self.calls) > self.unreachable_after:
            raise aiohttp.ClientConnectionError("connection refused")
        if self.record is None:
            missing = ApiException(status=404, reason="NotFound")
            missing.body = '{"code": 404}'
            return False, missing
        return True, self.record

    async def create(self, name: str, namespace: str, election_record: Record) -> bool:
        self.calls.append("create")
        self.record = election_record
        return True

    async def update(self, name: str, namespace: str, updated_record: Record) -> bool:
        self.calls.append("update")
        if self.calls.count("update") >= 2:
            self.updated_twice.set()
        if self.refuse:
            return False
        self.record = updated_record
        return True


def election(lock: FakeLock, work: Any = None, stopped: Any = None) -> Any:
    config = electionconfig.Config(
        lock, lease_duration=3, renew_deadline=2, retry_period=1,
        onstarted_leading=work or (lambda: asyncio.sleep(0)), onstopped_leading=stopped,
    )  # fmt: skip
    return leaderelection.LeaderElection(config)


@pytest.fixture
def berlin() -> Iterator[None]:
    """A node whose local time is not UTC."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = "Europe/Berlin"
    time.tzset()
    yield
    if before is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = before
    time.tzset()


def test_one_lock_per_election_and_no_release() -> None:
    assert next(iter(inspect.signature(electionconfig.Config).parameters)) == "lock"
    for cls in (leaderelection.LeaderElection, baselock.BaseLock, leaselock.LeaseLock):
        assert not [name for name in dir(cls) if "release" in name.lower()]


async def test_a_transport_error_leaves_the_leader_working() -> None:
    lock = FakeLock(unreachable_after=2)  # create, then the first renewal cannot connect
    working = asyncio.Event()
    stopped: list[bool] = []

    async def work() -> None:
        working.set()
        await asyncio.sleep(3600)

    async def stop() -> None:
        stopped.append(True)

    with pytest.raises(aiohttp.ClientConnectionError):
        await asyncio.wait_for(election(lock, work, stop).run(), 10)
    await working.wait()
    tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    assert [task for task in tasks if not task.done()]  # the leader's work goes on
    assert not stopped
    for task in tasks:
        task.cancel()


async def test_a_failed_write_is_tried_again_only_after_a_retry_period() -> None:
    lock = FakeLock(Record("me", "3", "2026-12-01 10:00:00.000001", "2026-12-01 10:00:00.000001"))
    lock.refuse = True
    elector = election(lock)
    started = time.monotonic()
    task = asyncio.create_task(elector.renew_loop())
    await asyncio.wait_for(lock.updated_twice.wait(), 10)
    assert time.monotonic() - started >= 0.9  # retry_period=1 between the two writes
    assert lock.calls[:4] == ["get", "update", "get", "update"]  # a read before every write
    task.cancel()


@pytest.mark.usefixtures("berlin")
async def test_the_record_is_local_time_labelled_utc_without_transitions() -> None:
    lock = FakeLock()
    await election(lock).try_acquire_or_renew()
    assert lock.record is not None
    spec = leaselock.LeaseLock.update_lease(leaselock.LeaseLock.__new__(leaselock.LeaseLock),
                                            lock.record)  # fmt: skip
    written = datetime.datetime.fromisoformat(spec.renew_time.replace("Z", "+00:00"))
    now = datetime.datetime.now(datetime.UTC)
    assert abs((written - now).total_seconds() - 3600) < 60  # Berlin's hour ahead, as "UTC"
    assert spec.lease_transitions is None


def test_a_float_duration_is_refused() -> None:
    record = Record("me", str(15.0), "2026-12-01 10:00:00.000001", "2026-12-01 10:00:00.000001")
    with pytest.raises(ValueError, match="invalid literal for int"):
        leaselock.LeaseLock.update_lease(leaselock.LeaseLock.__new__(leaselock.LeaseLock), record)


async def test_the_lease_writes_name_no_field_manager() -> None:
    class Api:
        def __init__(self) -> None:
            self.kwargs: list[dict[str, Any]] = []

        async def create_namespaced_lease(self, *args: Any, **kwargs: Any) -> None:
            self.kwargs.append(kwargs)

        async def replace_namespaced_lease(self, *args: Any, **kwargs: Any) -> None:
            self.kwargs.append(kwargs)

    lock = leaselock.LeaseLock.__new__(leaselock.LeaseLock)
    baselock.BaseLock.__init__(lock, "lease", "default", "me")
    lock.api_instance = Api()  # type: ignore[assignment]
    lock.lease_reference = None
    record = Record("me", "15", "2026-12-01 10:00:00.000001", "2026-12-01 10:00:00.000001")
    assert await lock.create("lease", "default", record)
    assert lock.api_instance.kwargs  # type: ignore[attr-defined]
    for kwargs in lock.api_instance.kwargs:  # type: ignore[attr-defined]
        assert "field_manager" not in kwargs


async def test_a_leader_seeing_a_foreign_holder_keeps_trying() -> None:
    lock = FakeLock(Record("other", "3", "2026-12-01 10:00:00.000001", "2026-12-01 10:00:00.01"))
    elector = election(lock)
    assert not await elector.try_acquire_or_renew()  # not given up: just "not this time"
    started = time.monotonic()
    await asyncio.wait_for(elector.renew_loop(), 10)
    assert time.monotonic() - started >= 1.9  # it went on for the renew deadline (2 s here)
    assert lock.calls.count("get") >= 3  # trying again each retry period meanwhile
