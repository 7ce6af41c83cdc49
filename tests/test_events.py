"""The event recorder: client-go's aggregation of repeats, and failures that lose nothing.

We test these aspects:
- an event is posted with the object reference, type, reason, message and source, named as
  client-go names it, never twice the same name;
- the same event again within the window bumps `count` on the first one instead of a new one;
- an API that refuses events is logged, never raised, and the next post works again;
- `post` does not wait for the API: events go out in the background, one at a time, in the
  order they were posted, and `flush_all` posts what is queued (before the API closes);
- beyond `MAX_QUEUED` waiting events, more are dropped with a warning, not held in memory;
- what a recorder remembers of an object goes with the object (`forget`), and is capped
  (`MAX_REMEMBERED`) otherwise, its oldest objects' entries first.
"""

from __future__ import annotations

import asyncio
import collections
import datetime
import pathlib
import re
import time
from typing import Any

import pytest
import structlog

from kopf_csi import events, kube
from kopf_csi.testing.emulator import EmulatedCluster

CLAIM: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "PersistentVolumeClaim",
    "metadata": {"name": "data", "namespace": "default", "uid": "u-1", "resourceVersion": "7"},
}


async def test_repeats_are_aggregated(cluster: EmulatedCluster, kubeconfig: pathlib.Path) -> None:
    async with await kube.KubeClient.connect(kubeconfig) as api:
        recorder = events.Recorder(api, component="test")
        for _ in range(3):
            await recorder.post(CLAIM, type_=events.WARNING, reason="R", message="m")
        await recorder.post(CLAIM, type_=events.NORMAL, reason="Other", message="m")
        await recorder.flush()
    posted = {e["reason"]: e for e in cluster.objects("events", namespace="default")}
    assert set(posted) == {"R", "Other"}
    assert posted["R"]["count"] == 3
    assert posted["R"]["type"] == "Warning"
    assert posted["R"]["involvedObject"]["uid"] == "u-1"
    assert posted["R"]["involvedObject"]["kind"] == "PersistentVolumeClaim"
    assert posted["R"]["source"]["component"] == "test"
    assert posted["Other"]["count"] == 1


async def test_an_event_is_named_as_client_go_names_it(
    cluster: EmulatedCluster, kubeconfig: pathlib.Path
) -> None:
    """`<object>.<UnixNano in hex>` (client-go's recorder), not a generated suffix."""
    before = time.time_ns()
    async with await kube.KubeClient.connect(kubeconfig) as api:
        recorder = events.Recorder(api, component="test")
        for reason in ("A", "B"):
            await recorder.post(CLAIM, type_=events.NORMAL, reason=reason, message="m")
        await recorder.flush()
    after = time.time_ns()
    names = sorted(e["metadata"]["name"] for e in cluster.objects("events", namespace="default"))
    assert len(names) == 2
    for name in names:
        prefix, _, stamp = name.rpartition(".")
        assert prefix == "data"
        assert before <= int(stamp, 16) <= after
    assert events.event_name("x") < events.event_name("x")  # never the same name twice


async def test_an_event_carries_the_time_in_utc_to_the_second(
    cluster: EmulatedCluster, kubeconfig: pathlib.Path
) -> None:
    before = int(time.time())
    async with await kube.KubeClient.connect(kubeconfig) as api:
        recorder = events.Recorder(api, component="test")
        await recorder.post(CLAIM, type_=events.NORMAL, reason="A", message="m")
        await recorder.flush()
    after = int(time.time())
    (event,) = cluster.objects("events", namespace="default")
    for key in ("firstTimestamp", "lastTimestamp"):
        stamp = event[key]
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", stamp), stamp
        when = datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)
        assert before <= when.timestamp() <= after


def test_event_names_never_repeat_nor_go_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two events in one nanosecond, or after the clock stepped back, still get new names
    (`time_ns` alone would repeat the first and go back with the second)."""
    stamps = iter([5000, 5000, 4000])
    monkeypatch.setattr(events, "_last_nanoseconds", 0)
    monkeypatch.setattr(events.time, "time_ns", lambda: next(stamps))
    assert [events.event_name("x") for _ in range(3)] == ["x.1388", "x.1389", "x.138a"]


async def test_a_refused_event_is_logged_not_raised(
    cluster: EmulatedCluster, kubeconfig: pathlib.Path
) -> None:
    async with await kube.KubeClient.connect(kubeconfig) as api:
        recorder = events.Recorder(api, component="test")
        fault = cluster.faults.add(500, verb="create", resource="events", times=1)
        with structlog.testing.capture_logs() as logs:
            await recorder.post(CLAIM, type_=events.WARNING, reason="R", message="m")
            await recorder.flush()
        assert [e["event"] for e in logs] == ["event_not_posted"]
        assert cluster.objects("events", namespace="default") == []
        cluster.faults.remove(fault)
        await recorder.post(CLAIM, type_=events.WARNING, reason="R", message="m")
        await recorder.flush()
    [posted] = cluster.objects("events", namespace="default")
    assert posted["count"] == 1


async def test_an_unreachable_api_holds_the_event_not_the_caller(
    tmp_path: pathlib.Path, unused_tcp_port: int
) -> None:
    """Events are best effort: the caller carries on; the event waits for the API server,
    quietly (the outage is logged once, by the client), and is given up on at the stop."""
    gone = EmulatedCluster(port=unused_tcp_port)  # never started: nothing listens there
    kubeconfig = gone.write_kubeconfig(tmp_path / "gone.json")
    async with await kube.KubeClient.connect(kubeconfig) as api:
        recorder = events.Recorder(api, component="test")
        with structlog.testing.capture_logs() as logs:
            await recorder.post(CLAIM, type_=events.WARNING, reason="R", message="m")
            await events.flush_all(timeout=1)
    warned = [e["event"] for e in logs if e["log_level"] == "warning"]
    assert warned == ["api_unreachable", "events_not_posted"]


async def test_an_event_posted_while_the_api_is_away_arrives_when_it_is_back(
    cluster: EmulatedCluster, kubeconfig: pathlib.Path
) -> None:
    async with await kube.KubeClient.connect(kubeconfig) as api:
        recorder = events.Recorder(api, component="test")
        with structlog.testing.capture_logs() as logs:
            await cluster.stop_apiserver(drain=0.0)
            await recorder.post(CLAIM, type_=events.WARNING, reason="R", message="m")
            await asyncio.sleep(0.3)  # refused, waiting
            await cluster.start_apiserver()
            await asyncio.wait_for(recorder.flush(), timeout=10)
    [posted] = cluster.objects("events", namespace="default")
    assert posted["reason"] == "R"
    assert "event_not_posted" not in [e["event"] for e in logs]


async def test_posting_does_not_wait_and_keeps_the_order(
    cluster: EmulatedCluster, kubeconfig: pathlib.Path
) -> None:
    """An operation goes on while its event is sent; the events arrive in the order posted."""
    async with await kube.KubeClient.connect(kubeconfig) as api:
        recorder = events.Recorder(api, component="test")
        for n in range(5):
            await recorder.post(CLAIM, type_=events.NORMAL, reason=f"R{n}", message="m")
        # Each `post` returned before its POST was even sent: nothing has reached the API.
        assert cluster.objects("events", namespace="default") == []
        await events.flush_all(timeout=10)
    posted = sorted(
        cluster.objects("events", namespace="default"),
        key=lambda e: int(e["metadata"]["resourceVersion"]),
    )
    assert [e["reason"] for e in posted] == ["R0", "R1", "R2", "R3", "R4"]


async def test_a_full_queue_drops_events_with_a_warning(
    cluster: EmulatedCluster, kubeconfig: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(events, "MAX_QUEUED", 3)
    async with await kube.KubeClient.connect(kubeconfig) as api:
        recorder = events.Recorder(api, component="test")
        with structlog.testing.capture_logs() as logs:
            for n in range(5):  # the sender has not run yet: all five wait at once
                await recorder.post(CLAIM, type_=events.NORMAL, reason=f"R{n}", message="m")
            await recorder.flush()
    assert [(e["event"], e["dropped"]) for e in logs] == [("events_dropped", 1)]  # said once
    assert recorder.dropped == 2
    assert {e["reason"] for e in cluster.objects("events", namespace="default")} == {
        "R0", "R1", "R2",
    }  # fmt: skip


async def test_a_burst_of_events_loses_none_and_keeps_each_objects_order(
    cluster: EmulatedCluster, kubeconfig: pathlib.Path
) -> None:
    """A 1,000-claim burst posts 2,000 events faster than one sender can: none is dropped,
    and each object's events arrive in the order they were posted."""
    async with await kube.KubeClient.connect(kubeconfig) as api:
        recorder = events.Recorder(api, component="test")
        claims = [
            {**CLAIM, "metadata": {**CLAIM["metadata"], "name": f"c{n}", "uid": f"u-{n}"}}
            for n in range(1200)
        ]
        for claim in claims:
            await recorder.post(claim, type_=events.NORMAL, reason="First", message="m")
        for claim in claims:
            await recorder.post(claim, type_=events.NORMAL, reason="Second", message="m")
        assert recorder.queued > 1000
        await recorder.flush()
        assert recorder.queued == 0
    posted = sorted(
        cluster.objects("events", namespace="default"),
        key=lambda e: int(e["metadata"]["resourceVersion"]),
    )
    assert len(posted) == 2400
    order: dict[str, list[str]] = {}
    for event in posted:
        order.setdefault(event["involvedObject"]["uid"], []).append(event["reason"])
    assert set(map(tuple, order.values())) == {("First", "Second")}


async def test_a_flush_that_times_out_gives_up_once_and_stops_the_senders(
    cluster: EmulatedCluster, kubeconfig: pathlib.Path
) -> None:
    """At stop, an API that does not answer in time: one warning, and nothing goes on
    posting against the client that is about to close."""
    cluster.write_latency = 30.0  # no POST answers within the flush's time
    async with await kube.KubeClient.connect(kubeconfig) as api:
        recorder = events.Recorder(api, component="test")
        for n in range(3):
            await recorder.post(CLAIM, type_=events.NORMAL, reason=f"R{n}", message="m")
        with structlog.testing.capture_logs() as logs:
            await events.flush_all(timeout=0.2)
        assert [(e["event"], e["queued"]) for e in logs] == [("events_not_posted", 2)]
        assert recorder.queued == 0
        assert all(s is None or s.done() for s in recorder._senders)
    assert cluster.objects("events", namespace="default") == []


def _claim(n: int) -> dict[str, Any]:
    return {**CLAIM, "metadata": {**CLAIM["metadata"], "name": f"c{n}", "uid": f"u-{n}"}}


async def test_a_deleted_objects_entries_are_forgotten(
    cluster: EmulatedCluster, kubeconfig: pathlib.Path
) -> None:
    """After an object's whole life (its events posted, then its DELETED event), no recorder
    keeps anything of it; the others' entries stay, and still aggregate their repeats."""
    async with await kube.KubeClient.connect(kubeconfig) as api:
        recorder = events.Recorder(api, component="test")
        other = events.Recorder(api, component="other")
        for claim in (_claim(1), _claim(2)):
            await recorder.post(claim, type_=events.NORMAL, reason="Provisioning", message="m")
            await recorder.post(claim, type_=events.NORMAL, reason="Succeeded", message="m")
        await other.post(_claim(1), type_=events.WARNING, reason="Other", message="m")
        await events.flush_all(timeout=10)
        assert (recorder.remembered, other.remembered) == (2 * 2 + 2, 1 + 1)

        events.forget("u-1")

        assert (recorder.remembered, other.remembered) == (2 + 1, 0)
        assert events.last_event("u-1") is None
        assert events.last_event("u-2") is not None
        await recorder.post(_claim(2), type_=events.NORMAL, reason="Succeeded", message="m")
        await recorder.flush()
    counts = {
        (e["involvedObject"]["uid"], e["reason"]): e["count"]
        for e in cluster.objects("events", namespace="default")
    }
    assert counts[("u-2", "Succeeded")] == 2


async def test_what_is_remembered_is_capped_oldest_object_first(
    cluster: EmulatedCluster, kubeconfig: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Objects never deleted (or whose DELETED event was missed) cost at most the cap."""
    monkeypatch.setattr(events, "MAX_REMEMBERED", 4)
    async with await kube.KubeClient.connect(kubeconfig) as api:
        recorder = events.Recorder(api, component="test")
        for n in range(10):
            for reason in ("A", "B"):
                await recorder.post(_claim(n), type_=events.NORMAL, reason=reason, message="m")
            await recorder.flush()
        assert recorder.remembered == 4 + 4  # aggregation entries, newest events
        assert set(recorder._posted) == {"u-8", "u-9"}
        await recorder.post(_claim(9), type_=events.NORMAL, reason="A", message="m")
        await recorder.post(_claim(0), type_=events.NORMAL, reason="A", message="m")
        await recorder.flush()
    counts = collections.Counter(
        (e["involvedObject"]["uid"], e["reason"])
        for e in cluster.objects("events", namespace="default")
    )
    assert counts[("u-9", "A")] == 1  # still aggregated: one event, its count bumped
    assert counts[("u-0", "A")] == 2  # forgotten for the cap: a new event


async def test_an_object_deleted_while_its_event_is_on_its_way_is_forgotten_after_it(
    cluster: EmulatedCluster, kubeconfig: pathlib.Path
) -> None:
    """The DELETED event can come before the recorder has posted the object's last events:
    they are still posted, and then nothing of the object stays."""
    cluster.write_latency = 0.2  # the POSTs are on their way when the object goes
    async with await kube.KubeClient.connect(kubeconfig) as api:
        recorder = events.Recorder(api, component="test")
        for reason in ("Provisioning", "ProvisioningSucceeded"):
            await recorder.post(_claim(1), type_=events.NORMAL, reason=reason, message="m")
        await asyncio.sleep(0)  # the sender has taken the first
        events.forget("u-1")
        await recorder.flush()
        assert recorder.remembered == 0
    assert {e["reason"] for e in cluster.objects("events", namespace="default")} == {
        "Provisioning", "ProvisioningSucceeded",
    }  # fmt: skip
