"""The emulated API's request durations (`testing/latency.py`): a real server's, under load.

We test these aspects:
- the real server's model names the measured durations (POST persistentvolumes 47 ms, the
  journal's PATCH configmaps 28 ms, ...) and defaults for the rest; watches are not delayed;
- a worker that sends one request at a time (KCM's binder) has its own means where the
  burst's mean is not its own (PUT persistentvolumeclaims: 21 ms at the peak, 5 ms one by one);
- draws are log-normal around each mean (the mean is kept) and seeded (a run repeats);
- over HTTP: writes to one object wait one after the other, as etcd serialises them, while
  writes to different objects overlap; a read waits its own duration only;
- `write_latency` is the uniform model: every write, no read;
- a worker's `Lateness`: what this process's loop made its waits end late is taken off its
  next waits, so a busy loop does not add up over a worker's queue;
- a model scaled by a factor (the benchmark's sustained-load factor) has every mean times it,
  the workers' own means and the defaults too, and keeps its spread and seed.
"""

from __future__ import annotations

import asyncio
import statistics
import time

from kubernetes_asyncio import client

from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.latency import (
    REAL_SERVER,
    Latency,
    LatencyModel,
    Lateness,
    uniform_writes,
)


def test_the_real_servers_durations_by_verb_and_kind() -> None:
    assert REAL_SERVER.mean("POST", "persistentvolumes") == 0.047
    assert REAL_SERVER.mean("PATCH", "configmaps") == 0.028
    assert REAL_SERVER.mean("PUT", "persistentvolumes/status") == 0.004
    assert REAL_SERVER.mean("GET", "persistentvolumes") == 0.002
    assert REAL_SERVER.mean("PUT", "leases") == REAL_SERVER.write == 0.010
    assert REAL_SERVER.mean("GET", "nodes") == REAL_SERVER.read == 0.003


def test_one_request_at_a_time_has_its_own_means_where_measured() -> None:
    assert REAL_SERVER.mean("PUT", "persistentvolumeclaims") == 0.021
    assert REAL_SERVER.mean("PUT", "persistentvolumeclaims", sequential=True) == 0.005
    assert REAL_SERVER.mean("PUT", "persistentvolumeclaims/status", sequential=True) == 0.005
    # Where nothing else was measured, the burst's mean holds for both.
    assert REAL_SERVER.mean("PUT", "persistentvolumes/status", sequential=True) == 0.004
    assert REAL_SERVER.mean("POST", "events", sequential=True) == 0.009


def test_draws_keep_the_mean_and_repeat_with_the_seed() -> None:
    first, second = Latency(REAL_SERVER), Latency(REAL_SERVER)
    draws = [first.draw("POST", "persistentvolumes") for _ in range(4000)]
    assert [second.draw("POST", "persistentvolumes") for _ in range(4000)] == draws
    assert abs(statistics.fmean(draws) - 0.047) < 0.047 * 0.05
    assert max(draws) > 2 * 0.047  # a tail
    assert Latency(LatencyModel(write=0.01)).draw("PATCH", "x") == 0.01  # no spread: exact


def test_a_scaled_model_has_every_mean_times_the_factor() -> None:
    scaled = REAL_SERVER.scaled(2.5)
    for method, resource in (("POST", "persistentvolumes"), ("PUT", "leases"), ("GET", "pods")):
        assert scaled.mean(method, resource) == 2.5 * REAL_SERVER.mean(method, resource)
    one_by_one = scaled.mean("PUT", "persistentvolumeclaims", sequential=True)
    assert one_by_one == 2.5 * REAL_SERVER.mean("PUT", "persistentvolumeclaims", sequential=True)
    assert (scaled.sigma, scaled.seed) == (REAL_SERVER.sigma, REAL_SERVER.seed)
    assert REAL_SERVER.scaled(1.0) == REAL_SERVER
    assert not REAL_SERVER.scaled(0.0).enabled


async def test_a_workers_lateness_is_taken_off_its_next_waits() -> None:
    """Three waits of 50 ms, the loop blocked for 100 ms during the first: it ends about 60 ms
    late, which the next two waits give back; the three end about when 150 ms of waits would
    (without the account: 210 ms)."""
    loop, lateness = asyncio.get_running_loop(), Lateness()
    loop.call_later(0.01, time.sleep, 0.1)  # the loop, busy elsewhere
    started = loop.time()
    await lateness.sleep(0.05)
    assert lateness.owed >= 0.05
    await lateness.sleep(0.05)
    await lateness.sleep(0.05)
    assert 0.15 <= loop.time() - started < 0.19
    assert 0.05 <= lateness.credited <= 0.1
    lateness.forgive()
    assert lateness.owed == 0.0


def test_write_latency_is_the_uniform_model() -> None:
    cluster = EmulatedCluster(write_latency=0.5)
    assert cluster.write_latency == 0.5
    assert cluster.latency.model == uniform_writes(0.5)
    assert cluster.latency.model.mean("GET", "persistentvolumes") == 0.0
    cluster.write_latency = 0.0
    assert not cluster.latency.model.enabled


async def test_writes_to_one_object_wait_in_turn_others_overlap(
    cluster: EmulatedCluster, core: client.CoreV1Api
) -> None:
    for name in ("a", "b"):
        cluster.create("configmaps", {"metadata": {"name": name}}, namespace="default")
    cluster.latency = Latency(LatencyModel(write=0.5, read=0.2))
    loop = asyncio.get_running_loop()

    async def patch(name: str, value: str) -> float:
        body = {"data": {"k": value}}
        await core.patch_namespaced_config_map(name, "default", body)
        return loop.time() - started

    started = loop.time()
    same = await asyncio.gather(patch("a", "1"), patch("a", "2"))
    first, second = sorted(same)
    assert first >= 0.5
    assert second >= 1.0  # the second waited for the first, then for its own
    started = loop.time()
    apart = await asyncio.gather(patch("a", "3"), patch("b", "3"))
    assert all(0.5 <= t < 0.95 for t in apart)  # two objects: side by side (in turn: 1 s)
    started = loop.time()
    await core.read_namespaced_config_map("a", "default")
    assert 0.2 <= loop.time() - started < 0.45  # a read: its own duration, no write order
