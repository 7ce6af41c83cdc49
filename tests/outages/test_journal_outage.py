"""The in-flight journal meets an API server that goes away, under a burst: nothing hangs.

On a real control plane restarted under a 200-claim burst, a journal lane's write met a broken
pipe (`ClientOSError(32, 'Broken pipe')`, aiohttp's own), which its flush loop did not catch:
the lane's task died, and 48 claims waited for ever on its batch's future (issue 30). We test
these aspects:
- a write that raises anything at all (here aiohttp's broken pipe itself, as a client that let
  it through would) fails every caller waiting on that batch with `JournalError`, at once, and
  the lane goes on: the next records are written;
- the removals of that failed write are retried with a backoff, not lost;
- against the emulated server restarted in the middle of a burst of records, every caller
  either has its record or a `JournalError` (none waits), and once the server is back every
  claim can be recorded, and every removal lands.
"""

from __future__ import annotations

import asyncio
import pathlib
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp
import pytest

from kopf_csi import kube
from kopf_csi.provisioning.journal import Journal, JournalError
from kopf_csi.testing.emulator import EmulatedCluster

from ..conftest import until
from ..journal.test_inflight_restart import _claim


def _with_uid(name: str) -> dict[str, Any]:
    claim = _claim(name)
    claim["metadata"]["uid"] = f"uid-{name}"
    return claim


class _BrokenPipes:
    """A client whose writes fail with aiohttp's broken pipe while `broken` is set."""

    def __init__(self) -> None:
        self.broken = True
        self.data: dict[str, str] = {}
        self.writes = 0

    async def get(self, resource: kube.Resource, name: str, namespace: str) -> dict[str, Any]:
        return {"data": dict(self.data)}  # the lane's ConfigMap exists

    async def patch(
        self,
        resource: kube.Resource,
        name: str,
        patch: Mapping[str, Any],
        namespace: str,
        *,
        answer: bool = True,
    ) -> dict[str, Any]:
        self.writes += 1
        await asyncio.sleep(0.01)  # the batch fills meanwhile
        if self.broken:
            raise aiohttp.ClientOSError(32, "Broken pipe")
        for key, value in patch["data"].items():
            if value is None:
                self.data.pop(key, None)
            else:
                self.data[key] = value
        return {}


async def test_a_broken_pipe_fails_the_batch_and_the_lane_goes_on() -> None:
    api = _BrokenPipes()
    journal = Journal(api, namespace="default", name="journal", lanes=1)  # type: ignore[arg-type]
    await journal.load()
    claims = [_with_uid(f"c{i}") for i in range(20)]
    async with asyncio.timeout(5):  # before the fix: the callers waited for ever
        outcomes = await asyncio.gather(
            *(journal.record(claim) for claim in claims), return_exceptions=True
        )
    assert all(isinstance(outcome, JournalError) for outcome in outcomes), outcomes
    assert "Broken pipe" in str(outcomes[0])

    api.broken = False
    async with asyncio.timeout(5):
        await asyncio.gather(*(journal.record(claim) for claim in claims))
    assert set(api.data) == {f"uid-c{i}" for i in range(20)}


async def test_removals_of_a_failed_write_are_retried() -> None:
    api = _BrokenPipes()
    api.broken = False
    journal = Journal(api, namespace="default", name="journal", lanes=1, removal_delay=0.0)
    await journal.load()  # type: ignore[arg-type]
    await journal.record(_with_uid("a"))
    api.broken = True
    journal.release("uid-a")
    await until(lambda: api.writes >= 3, timeout=5)  # failed, and tried again
    api.broken = False
    await until(lambda: not api.data, timeout=10)


@pytest.fixture
async def api(kubeconfig: pathlib.Path) -> AsyncIterator[kube.KubeClient]:
    async with await kube.KubeClient.connect(kubeconfig) as client:
        yield client


async def test_a_restart_under_a_burst_leaves_no_caller_waiting(
    cluster: EmulatedCluster, api: kube.KubeClient
) -> None:
    cluster.write_latency = 0.02
    journal = Journal(api, namespace="default", name="journal", removal_delay=0.0)
    await journal.load()
    claims = [_with_uid(f"c{i}") for i in range(100)]

    async def burst() -> list[BaseException | None]:
        outcomes: list[BaseException | None] = []
        for start in range(0, len(claims), 10):
            batch = claims[start : start + 10]
            outcomes += await asyncio.gather(
                *(journal.record(claim) for claim in batch), return_exceptions=True
            )
            await asyncio.sleep(0.02)
        return outcomes

    async with asyncio.timeout(30):
        recording = asyncio.create_task(burst())
        await asyncio.sleep(0.05)
        await cluster.restart_apiserver(drain=0.3, gone=0.3)
        outcomes = await recording
    failed = [o for o in outcomes if o is not None]
    assert failed, "the outage failed no record: it did not happen"
    assert all(isinstance(o, JournalError) for o in failed), failed
    assert cluster.control_plane.answered_503
    assert cluster.control_plane.reset

    async with asyncio.timeout(10):  # back: every claim is recorded, then every one released
        await asyncio.gather(*(journal.record(claim) for claim in claims))
    for claim in claims:
        journal.release(claim["metadata"]["uid"])
    await until(lambda: not (cluster.get("configmaps", "default", "journal") or {}).get("data"))
    await journal.close()
