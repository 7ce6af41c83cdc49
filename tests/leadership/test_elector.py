"""The Elector against the emulated API over HTTP, without kopf: the Lease protocol itself.

We test these aspects:
- acquiring creates the Lease with client-go's fields and formats; renewing moves only
  renewTime (and the resourceVersion), never acquireTime or the transitions;
- two candidates racing for one Lease: exactly one leads, the other waits, no errors;
- a conflict (409) on a renewal is retried through a fresh read within the same round;
- renewals failing for the renew deadline: `on_lost` is called once, with the reason; also
  when the API cannot be reached at all (no answer: the renewal loop must not die of it);
- another holder appearing in the record: leadership is given up at the next renewal;
- releasing: no holder, 1 s, transitions kept; the next candidate takes it at once;
- a standby reads the Leases after the first it cannot have: after a crash of the leader, all
  of them expire for it within one lease duration, not one after another;
- a stop lets the renewal in flight finish, then releases from its answer (no 409);
- a release that meets a 409 reads the Lease again and releases it while it is still ours, a
  bounded number of times; a write whose answer was lost (applied all the same) is released
  from a fresh read; a 409 on acquisition (even on the creation) is retried at once;
- the watchdog: healthy while standby or renewing, unhealthy once renewals are overdue;
- the LeaderElection events client-go posts on the Lease.
"""

from __future__ import annotations

import asyncio
import json
import pathlib
import re
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import pytest
import structlog

from kopf_csi import kube, leadership, leases
from kopf_csi.leadership import Elector
from kopf_csi.testing.emulator import EmulatedCluster

from ..conftest import until
from .conftest import FAST

NAMESPACE = "default"
LEASE = "hostpath-csi-kopf-dev"
MICROTIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


class Losses:
    def __init__(self) -> None:
        self.reasons: list[str] = []

    async def __call__(self, reason: str) -> None:
        self.reasons.append(reason)


class Answers:
    """The API client, with a say over the answers to Lease writes (the server applies each).

    `lose`: the answers to so many next writes never come, as for a PUT cut off by the stop or
    by a timeout; `delay`: each answer comes that much later; `sent`: a write is on its way.
    """

    def __init__(self, api: kube.KubeClient) -> None:
        self.api = api
        self.lose = 0
        self.delay = 0.0
        self.sent = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.api, name)

    async def create(self, resource: kube.Resource, body: Mapping[str, Any]) -> kube.Body:
        self.sent.set()
        return await self._answer(await self.api.create(resource, body))

    async def replace(self, resource: kube.Resource, body: Mapping[str, Any]) -> kube.Body:
        self.sent.set()
        return await self._answer(await self.api.replace(resource, body))

    async def _answer(self, answer: kube.Body) -> kube.Body:
        await asyncio.sleep(self.delay)
        if self.lose > 0:
            self.lose -= 1
            raise TimeoutError
        return answer


def make(
    api: kube.KubeClient,
    identity: str,
    *,
    leases: tuple[str, ...] = (LEASE,),
    on_lost: Losses | None = None,
    clock: Callable[[], float] | None = None,
) -> Elector:
    extra = {} if clock is None else {"clock": clock}
    return Elector(
        api, leases=leases, namespace=NAMESPACE, identity=identity, config=FAST,
        on_lost=on_lost, **extra,
    )  # fmt: skip


async def leader(api: kube.KubeClient | Answers, identity: str = "replica-a") -> Elector:
    """An Elector that holds the Lease (not renewing it: `start()` is the caller's)."""
    elector = make(api, identity)  # type: ignore[arg-type]
    await elector.acquire()
    return elector


@pytest.fixture
def answers(api: kube.KubeClient) -> Answers:
    return Answers(api)


@pytest.fixture
async def electors() -> AsyncIterator[list[Elector]]:
    """Electors to stop (without releasing) after the test, whatever happened."""
    made: list[Elector] = []
    yield made
    for elector in made:
        await elector.stop(release=False)


def spec(cluster: EmulatedCluster, name: str = LEASE) -> dict[str, object]:
    lease = cluster.get("leases", NAMESPACE, name)
    assert lease is not None
    return dict(lease["spec"])


async def test_acquire_creates_the_lease_and_renewals_move_only_renew_time(
    cluster: EmulatedCluster, api: kube.KubeClient, electors: list[Elector]
) -> None:
    elector = make(api, "replica-a")
    electors.append(elector)
    await asyncio.wait_for(elector.acquire(), 5)
    assert elector.is_leader
    created = cluster.get("leases", NAMESPACE, LEASE)
    assert created is not None
    first = created["spec"]
    assert set(first) == {
        "holderIdentity", "leaseDurationSeconds", "acquireTime", "renewTime", "leaseTransitions",
    }  # fmt: skip
    assert first["holderIdentity"] == "replica-a"
    assert first["leaseDurationSeconds"] == 2
    assert first["leaseTransitions"] == 0
    assert MICROTIME.match(first["acquireTime"])
    assert first["acquireTime"] == first["renewTime"]

    elector.start()
    renewed = await cluster.wait_for(
        "leases", NAMESPACE, LEASE, lambda obj: obj is not None and
        obj["spec"]["renewTime"] != first["renewTime"], timeout=5,
    )  # fmt: skip
    assert renewed is not None
    assert renewed["spec"]["acquireTime"] == first["acquireTime"]
    assert renewed["spec"]["leaseTransitions"] == 0
    assert renewed["spec"]["renewTime"] > first["renewTime"]
    assert renewed["metadata"]["uid"] == created["metadata"]["uid"]  # replaced, not re-created
    assert int(renewed["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])


async def test_two_candidates_racing_for_one_lease_get_one_leader(
    cluster: EmulatedCluster, api: kube.KubeClient, electors: list[Elector]
) -> None:
    a, b = make(api, "replica-a"), make(api, "replica-b")
    electors.extend([a, b])
    tasks = [asyncio.create_task(e.acquire()) for e in (a, b)]
    done, pending = await asyncio.wait(tasks, timeout=5, return_when=asyncio.FIRST_COMPLETED)
    winner = a if tasks[0] in done else b
    winner.start()
    await asyncio.sleep(3 * FAST.lease_duration / 2)  # the loser keeps trying, and waits
    assert len(done) == 1
    assert len(pending) == 1
    assert [e.is_leader for e in (a, b)].count(True) == 1
    assert spec(cluster)["holderIdentity"] == winner.identity
    assert spec(cluster)["leaseTransitions"] == 0
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)


async def test_a_conflict_on_renewal_is_retried_after_a_fresh_read(
    cluster: EmulatedCluster, api: kube.KubeClient, electors: list[Elector]
) -> None:
    losses = Losses()
    elector = make(api, "replica-a", on_lost=losses)
    electors.append(elector)
    await elector.acquire()
    elector.start()
    before = spec(cluster)["renewTime"]
    conflict = cluster.faults.add(409, verb="update", resource="leases", times=3)
    await until(lambda: conflict.times == 0 and spec(cluster)["renewTime"] != before, timeout=5)
    await asyncio.sleep(FAST.renew_deadline)
    assert elector.is_leader
    assert losses.reasons == []


async def test_renewals_failing_past_the_deadline_lose_leadership_once(
    cluster: EmulatedCluster, api: kube.KubeClient, electors: list[Elector]
) -> None:
    losses = Losses()
    elector = make(api, "replica-a", on_lost=losses)
    electors.append(elector)
    await elector.acquire()
    elector.start()
    await asyncio.sleep(0.5)
    cluster.faults.add(500, verb="update", resource="leases", times=None)
    loop = asyncio.get_running_loop()
    failing_since = loop.time()
    await until(lambda: losses.reasons, timeout=5)
    assert loop.time() - failing_since < FAST.renew_deadline + 2 * FAST.retry_period + 0.5
    assert not elector.is_leader
    assert elector.lost == losses.reasons[0]
    assert f"failed to renew Lease {NAMESPACE}/{LEASE}" in losses.reasons[0]
    assert elector.check()[0]  # not overdue yet: the process is expected to stop meanwhile
    await asyncio.sleep(FAST.renew_deadline)
    assert len(losses.reasons) == 1


async def test_renewals_that_reach_no_api_lose_leadership(
    api: kube.KubeClient, electors: list[Elector], tmp_path: pathlib.Path, unused_tcp_port: int
) -> None:
    losses = Losses()
    elector = make(api, "replica-a", on_lost=losses)
    electors.append(elector)
    await elector.acquire()
    kubeconfig = tmp_path / "nobody-listens.json"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "gone",
        "clusters": [{"name": "gone", "cluster": {"server": f"http://127.0.0.1:{unused_tcp_port}"}}],
        "users": [{"name": "gone", "user": {}}],
        "contexts": [{"name": "gone", "context": {"cluster": "gone", "user": "gone"}}],
    }))  # fmt: skip
    async with await kube.KubeClient.connect(kubeconfig) as unreachable:
        for candidate in elector.candidates:
            candidate.api = unreachable  # connections refused from now on
        elector.start()
        await until(lambda: losses.reasons, timeout=5)
    assert f"failed to renew Lease {NAMESPACE}/{LEASE}" in losses.reasons[0]
    assert not elector.is_leader


async def test_another_holder_in_the_record_ends_leadership_at_once(
    cluster: EmulatedCluster, api: kube.KubeClient, electors: list[Elector]
) -> None:
    losses = Losses()
    elector = make(api, "replica-a", on_lost=losses)
    electors.append(elector)
    await elector.acquire()
    elector.start()
    cluster.patch("leases", NAMESPACE, LEASE, {"spec": {"holderIdentity": "intruder"}})
    await until(lambda: losses.reasons, timeout=FAST.renew_deadline)
    assert "is held by 'intruder'" in losses.reasons[0]
    assert spec(cluster)["holderIdentity"] == "intruder"  # never overwritten


async def test_release_lets_the_next_candidate_take_over_at_once(
    cluster: EmulatedCluster, api: kube.KubeClient, electors: list[Elector]
) -> None:
    a, b = make(api, "replica-a"), make(api, "replica-b")
    electors.extend([a, b])
    await a.acquire()
    a.start()
    waiting = asyncio.create_task(b.acquire())
    await until(lambda: b.holders[LEASE] == "replica-a")
    await a.stop()
    released = spec(cluster)
    assert released["holderIdentity"] == "" or released["holderIdentity"] == "replica-b"
    await asyncio.wait_for(waiting, 2 * FAST.retry_period * (1 + leadership.JITTER) + 0.5)
    taken = spec(cluster)
    assert taken["holderIdentity"] == "replica-b"
    assert taken["leaseTransitions"] == 1
    assert taken["leaseDurationSeconds"] == 2


async def test_a_crashed_leaders_leases_expire_together_for_a_standby(
    cluster: EmulatedCluster, api: kube.KubeClient, electors: list[Elector]
) -> None:
    """Every Lease after the first it cannot have is read (not written) each round, so its
    expiry is timed from the start: after a crash, all expire within one lease duration."""
    names = (LEASE, "external-attacher-leader-hostpath-csi-kopf-dev", "external-resizer-x")
    now = [1000.0]
    a = make(api, "replica-a", leases=names)
    b = make(api, "replica-b", leases=names, clock=lambda: now[0])
    electors.extend([a, b])
    await a.acquire()  # and never renews: it crashed
    waiting = asyncio.create_task(b.acquire())
    try:
        await until(lambda: b.holders == dict.fromkeys(names, "replica-a"))
        assert b.check() == (True, f"standby as replica-b: held by replica-a: {', '.join(names)}")
        now[0] += FAST.lease_duration + 0.1  # the clock moves once, and only once
        # b's clock stands still from here: a Lease first observed now would never expire for
        # it, and b would never lead. The bound only ends the test; it times nothing.
        await asyncio.wait_for(asyncio.shield(waiting), 30)
    finally:
        waiting.cancel()
    assert b.is_leader
    assert {spec(cluster, name)["holderIdentity"] for name in names} == {"replica-b"}


async def test_release_writes_client_gos_released_record(
    cluster: EmulatedCluster, api: kube.KubeClient
) -> None:
    elector = make(api, "replica-a")
    await elector.acquire()
    await elector.stop()
    released = spec(cluster)
    assert released["holderIdentity"] == ""
    assert released["leaseDurationSeconds"] == 1
    assert released["leaseTransitions"] == 0
    assert released["acquireTime"] == released["renewTime"]


async def test_the_watchdog_reports_overdue_renewals(
    cluster: EmulatedCluster, api: kube.KubeClient, electors: list[Elector]
) -> None:
    now = [1000.0]
    elector = make(api, "replica-a", clock=lambda: now[0])
    electors.append(elector)
    ok, detail = elector.check()
    assert ok
    assert "standby" in detail
    await elector.acquire()
    ok, detail = elector.check()
    assert ok
    assert "leading" in detail
    now[0] += FAST.lease_duration + leadership.HEALTH_TOLERANCE - 0.1
    assert elector.check()[0]
    now[0] += 0.2
    assert elector.check() == (False, f"failed election to renew leadership on lease {LEASE}")


async def test_became_leader_is_an_event_on_the_lease(
    cluster: EmulatedCluster, api: kube.KubeClient
) -> None:
    elector = make(api, "replica-a")
    await elector.acquire()
    await elector.stop()
    posted = [e for e in cluster.objects("events") if e["involvedObject"]["kind"] == "Lease"]
    assert sorted((e["reason"], e["message"]) for e in posted) == [
        ("LeaderElection", "replica-a became leader"),
        ("LeaderElection", "replica-a stopped leading"),
    ]
    assert {e["involvedObject"]["name"] for e in posted} == {LEASE}
    assert {e["source"]["component"] for e in posted} == {f"{LEASE}/replica-a"}


async def test_a_stop_lets_the_renewal_in_flight_finish_then_releases(
    cluster: EmulatedCluster, answers: Answers
) -> None:
    elector = await leader(answers)
    answers.delay = FAST.retry_period  # well within the renew deadline
    answers.sent.clear()
    elector.start()
    await asyncio.wait_for(answers.sent.wait(), 5)  # a renewal is on its way
    with structlog.testing.capture_logs() as logs:
        await elector.stop()
    assert [e["event"] for e in logs if e["event"].startswith("lease_")] == ["lease_released"]
    assert spec(cluster)["holderIdentity"] == ""


async def test_a_conflict_on_release_is_retried_after_a_fresh_read(
    cluster: EmulatedCluster, api: kube.KubeClient
) -> None:
    elector = await leader(api)
    conflict = cluster.faults.add(409, verb="update", resource="leases", name=LEASE)
    await elector.stop()
    assert conflict.times == 0
    assert spec(cluster)["holderIdentity"] == ""
    assert spec(cluster)["leaseTransitions"] == 0


async def test_a_release_that_keeps_conflicting_gives_up_after_a_few_reads(
    cluster: EmulatedCluster, api: kube.KubeClient
) -> None:
    elector = await leader(api)
    tries = leadership.CONFLICT_RETRIES + 1
    conflicts = cluster.faults.add(409, verb="update", resource="leases", times=tries + 1)
    loop = asyncio.get_running_loop()
    stopping_since = loop.time()
    await elector.stop()
    assert loop.time() - stopping_since < FAST.renew_deadline
    assert conflicts.times == 1  # the first write and CONFLICT_RETRIES more, then it gave up
    assert spec(cluster)["holderIdentity"] == "replica-a"  # left to expire
    cluster.faults.remove(conflicts)


async def test_a_release_after_a_lost_answer_reads_the_lease_first(
    cluster: EmulatedCluster, answers: Answers
) -> None:
    elector = await leader(answers)
    before = spec(cluster)["renewTime"]
    answers.lose = 1
    assert not await elector.candidates[0].attempt(timeout=FAST.renew_deadline)
    assert spec(cluster)["renewTime"] != before  # renewed, but we never saw the answer
    await elector.stop()
    assert spec(cluster)["holderIdentity"] == ""


async def test_a_creation_whose_answer_was_lost_is_released_all_the_same(
    cluster: EmulatedCluster, answers: Answers
) -> None:
    elector = make(answers, "replica-a")  # type: ignore[arg-type]
    answers.lose = 1
    assert not await elector.candidates[0].attempt(timeout=FAST.renew_deadline)
    assert spec(cluster)["holderIdentity"] == "replica-a"  # created, but we never saw it
    await elector.stop()  # stopped while standby, as lifecycle.connect does
    assert spec(cluster)["holderIdentity"] == ""


@pytest.mark.parametrize("verb", ["create", "update"])
async def test_a_conflict_on_acquisition_is_retried_at_once(
    cluster: EmulatedCluster, api: kube.KubeClient, electors: list[Elector], verb: str
) -> None:
    if verb == "update":  # a released Lease, to take
        released = leases.LeaseRecord("", 1, "2026-11-29T10:00:00.000000Z", None, 2)
        cluster.create("leases", leases.lease_body(LEASE, NAMESPACE, released, {}))
    elector = make(api, "replica-b")
    electors.append(elector)
    conflict = cluster.faults.add(409, verb=verb, resource="leases")  # a POST names no object
    assert await elector.candidates[0].attempt(timeout=FAST.renew_deadline)  # in one attempt
    assert conflict.times == 0
    assert spec(cluster)["holderIdentity"] == "replica-b"
