"""`--kube-api-qps` and `--kube-api-burst`: the client-side limit on API requests.

We test these aspects:
- the token bucket (pure): a burst goes at once, then one request per 1/qps seconds, first
  come first served; idle time refills it up to the burst and no further; bad limits refused;
- a request that may give way (an event) takes a token only when one is there, so the role's
  other requests go first; the limit itself is the same;
- the API client: each role (field manager) has a bucket of its own, as each Go sidecar's
  client has; requests beyond the burst wait for their turn; a client without limits never
  waits;
- the operator (kopf running the real handler modules against the emulated API and the
  reference driver) applies the settings: a burst of claims is provisioned, and the
  provisioner's requests beyond the burst are held to the QPS.
"""

from __future__ import annotations

import asyncio
import pathlib

import pytest
import structlog.testing

from kopf_csi import kube, leadership
from kopf_csi.settings import LeaderElectionSettings
from kopf_csi.throttling import TokenBucket

FAST = LeaderElectionSettings(
    enabled=True, lease_duration=2.0, renew_deadline=1.0, retry_period=0.2
)


def test_a_burst_goes_at_once_then_one_request_per_token() -> None:
    bucket = TokenBucket(qps=10.0, burst=3)
    delays = [bucket.reserve(100.0) for _ in range(6)]
    assert delays == pytest.approx([0.0, 0.0, 0.0, 0.1, 0.2, 0.3])
    assert (bucket.requests, bucket.delayed) == (6, 3)
    assert bucket.waited == pytest.approx(0.6)
    assert bucket.summary()["max_wait_ms"] == pytest.approx(300.0)


def test_idle_time_refills_up_to_the_burst_and_no_further() -> None:
    bucket = TokenBucket(qps=10.0, burst=2)
    assert [bucket.reserve(0.0) for _ in range(3)] == pytest.approx([0.0, 0.0, 0.1])
    # 0.25 s later: the waiter's token came at 0.1 s, and 1.5 more since; 2 at most are kept.
    assert bucket.reserve(0.25) == 0.0
    assert bucket.reserve(0.25) == pytest.approx(0.05)
    assert bucket.reserve(60.0) == 0.0  # a minute idle: a whole burst again, not 600
    assert bucket.reserve(60.0) == 0.0
    assert bucket.reserve(60.0) == pytest.approx(0.1)


def test_a_request_that_gives_way_takes_only_a_token_that_is_there() -> None:
    bucket = TokenBucket(qps=10.0, burst=1)
    assert bucket.reserve_spare(0.0) == 0.0  # the burst's token
    assert bucket.reserve_spare(0.0) == pytest.approx(0.1)  # none: asks again in 0.1 s
    assert bucket.reserve(0.05) == pytest.approx(0.05)  # meanwhile another reserves it
    assert bucket.reserve_spare(0.1) == pytest.approx(0.1)  # so it waits one token more
    assert bucket.reserve_spare(0.2, waited=0.2) == 0.0
    assert (bucket.requests, bucket.delayed) == (3, 2)
    assert bucket.waited == pytest.approx(0.25)


@pytest.mark.parametrize(("qps", "burst"), [(0.0, 1), (-1.0, 1), (1.0, 0)])
def test_limits_that_would_stop_every_request_are_refused(qps: float, burst: int) -> None:
    with pytest.raises(ValueError, match=r"QPS|burst"):
        TokenBucket(qps=qps, burst=burst)


async def test_requests_beyond_the_burst_wait_for_their_turn(kubeconfig: pathlib.Path) -> None:
    async with await kube.KubeClient.connect(kubeconfig, qps=4.0, burst=2) as api:
        loop = asyncio.get_running_loop()
        started = loop.time()
        await asyncio.gather(*(api.get(kube.CONFIGMAPS, f"cm-{i}", "default") for i in range(4)))
        elapsed = loop.time() - started
        assert api.limits is not None
        bucket = api.limits.buckets[kube.DEFAULT_MANAGER]
        assert (bucket.requests, bucket.delayed) == (4, 2)
        assert elapsed >= 0.45  # the fourth request's token was due 0.5 s after the first


async def test_each_role_has_a_bucket_of_its_own(kubeconfig: pathlib.Path) -> None:
    async with await kube.KubeClient.connect(kubeconfig, qps=0.1, burst=1) as api:
        attacher = api.as_manager("csi-attacher")
        provisioner = api.as_manager("csi-provisioner")
        await asyncio.wait_for(
            asyncio.gather(
                attacher.get(kube.CONFIGMAPS, "a", "default"),
                provisioner.get(kube.CONFIGMAPS, "b", "default"),
            ),
            timeout=5.0,  # one shared bucket would hold the second request 10 s
        )
        assert api.limits is not None
        assert sorted(api.limits.buckets) == ["csi-attacher", "csi-provisioner", "kopf-csi"]
        assert all(bucket.delayed == 0 for bucket in api.limits.buckets.values())


async def test_a_client_without_limits_never_waits(kubeconfig: pathlib.Path) -> None:
    async with await kube.KubeClient.connect(kubeconfig) as api:
        await asyncio.gather(*(api.get(kube.CONFIGMAPS, f"cm-{i}", "default") for i in range(5)))
        assert api.limits is None
        assert api.as_manager("csi-provisioner").limits is None


def test_a_long_wait_is_reported_at_most_once_in_ten_seconds() -> None:
    bucket = TokenBucket(qps=1.0, burst=1)
    assert not bucket.report_due(0.0, 1.0)  # not over a second
    assert bucket.report_due(0.0, 1.5)
    assert not bucket.report_due(9.9, 5.0)
    assert bucket.report_due(10.0, 5.0)


async def test_a_long_wait_is_logged_with_what_to_change(kubeconfig: pathlib.Path) -> None:
    async with await kube.KubeClient.connect(kubeconfig, qps=1.0, burst=1) as api:
        with structlog.testing.capture_logs() as logs:
            await asyncio.gather(*(api.get(kube.CONFIGMAPS, f"c-{i}", "default") for i in range(4)))
    throttled = [entry for entry in logs if entry["event"] == "api_requests_throttled"]
    assert len(throttled) == 1  # the third waited 2 s, the fourth 3 s: one line
    (line,) = throttled
    assert line["log_level"] == "info"
    assert line["manager"] == kube.DEFAULT_MANAGER
    assert line["waited"] == pytest.approx(2.0, abs=0.05)
    assert line["request"].startswith("GET /api/v1/namespaces/default/configmaps/c-")
    assert "--kube-api-qps" in line["hint"]


async def test_events_give_way_to_the_work_they_report(kubeconfig: pathlib.Path) -> None:
    async with await kube.KubeClient.connect(kubeconfig, qps=1.0, burst=1) as api:
        events = api.giving_way()
        assert events.gives_way
        assert events.manager == api.manager
        await api.get(kube.CONFIGMAPS, "first", "default")  # the burst is spent
        done: list[str] = []

        async def get(client: kube.KubeClient, name: str) -> None:
            await client.get(kube.CONFIGMAPS, name, "default")
            done.append(name)

        spare = asyncio.create_task(get(events, "event"))
        await asyncio.sleep(0.05)  # the event asked first, the work asks 0.95 s before its turn
        await get(api, "work")
        await spare
        assert done == ["work", "event"]


async def test_leader_election_never_waits_behind_the_roles_work(
    kubeconfig: pathlib.Path,
) -> None:
    """Each Go sidecar gives leader election a client of its own (external-attacher #241):
    a Lease's renewal must not wait behind a burst's throttled requests, or leadership is
    lost in the middle of the burst."""
    async with await kube.KubeClient.connect(kubeconfig, qps=1.0, burst=1) as api:
        role = api.as_manager("csi-provisioner")
        assert api.limits is not None
        api.limits.bucket("csi-provisioner").tokens = -100.0  # 100 s of work queued
        elector = leadership.Elector(
            role, leases=["x"], namespace="default", identity="me", config=FAST,
            managers={"x": "csi-provisioner"},
        )  # fmt: skip
        (candidate,) = elector.candidates
        assert candidate.api.manager == "csi-provisioner"  # its writes still the role's
        await asyncio.wait_for(candidate.api.get(kube.LEASES, "x", "default"), timeout=5.0)
        await asyncio.wait_for(role.for_leader_election().get(kube.LEASES, "y", "default"), 5.0)
