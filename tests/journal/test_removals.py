"""The journal's record and removal of one claim overlapping in flight: the promise holds.

A lane writes one batch at a time; a claim's record, its removal (the outcome is known) and
its record again (a retry) may each find another write of the same claim in flight. With
journal writes that take 2 s (a real server takes about 28 ms; the length only widens the
window), we test these aspects:
- a claim recorded again while its removal is in flight is written again after it: `record`
  returns once the record is durable, not before the removal lands (it returned at once, and
  the removal then deleted the record: CreateVolume would run unrecorded);
- a record released while its own write is in flight is removed after that write;
- `holds` is false while a removal is in flight;
- a failed write fails every caller waiting on it, and the next `record` writes again.
"""

from __future__ import annotations

import asyncio
import pathlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from kopf_csi import kube
from kopf_csi.provisioning.journal import Journal, JournalError
from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.latency import Latency, LatencyModel

from ..conftest import until
from .test_inflight_restart import _claim

WRITE = 2.0  # seconds a journal write takes (the API server's time)


@pytest.fixture
async def api(kubeconfig: pathlib.Path) -> AsyncIterator[kube.KubeClient]:
    async with await kube.KubeClient.connect(kubeconfig) as client:
        yield client


def _slow_journal(cluster: EmulatedCluster) -> None:
    """Journal writes take `WRITE`; every other request is answered at once."""
    cluster.latency = Latency(
        LatencyModel(means={"PATCH configmaps": WRITE, "POST configmaps": WRITE})
    )


def _journal_writes(cluster: EmulatedCluster) -> int:
    return sum(cluster.requests.count(verb=v, resource="configmaps") for v in ("create", "patch"))


def _with_uid(name: str) -> dict[str, Any]:
    claim = _claim(name)
    claim["metadata"]["uid"] = f"uid-{name}"
    return claim


async def _writing(cluster: EmulatedCluster, count: int) -> None:
    """Until `count` journal writes have been sent (the server is still taking its time)."""
    await until(lambda: _journal_writes(cluster) >= count, timeout=WRITE * 5)


def _data(cluster: EmulatedCluster) -> dict[str, str]:
    return (cluster.get("configmaps", "default", "journal") or {}).get("data") or {}


async def test_a_record_made_again_during_its_removal_is_written_after_it(
    cluster: EmulatedCluster, api: kube.KubeClient
) -> None:
    journal = Journal(api, namespace="default", name="journal", lanes=1, removal_delay=0.0)
    await journal.load()
    await journal.record(_with_uid("a"))
    _slow_journal(cluster)
    journal.release("uid-a")
    await _writing(cluster, 2)  # the removal is on its way
    assert not journal.holds("uid-a")
    await journal.record(_with_uid("a"))
    assert journal.writes == 3  # the record, its removal, the record again
    assert "uid-a" in _data(cluster)
    assert journal.holds("uid-a")


async def test_a_record_released_during_its_write_is_removed_after_it(
    cluster: EmulatedCluster, api: kube.KubeClient
) -> None:
    journal = Journal(api, namespace="default", name="journal", lanes=1, removal_delay=0.0)
    await journal.load()
    _slow_journal(cluster)
    recording = asyncio.create_task(journal.record(_with_uid("a")))
    await _writing(cluster, 1)
    journal.release("uid-a")  # the outcome came before the record's write ended
    assert not journal.holds("uid-a")
    await recording
    await until(lambda: journal.writes == 2, timeout=WRITE * 5)  # the removal follows
    await until(lambda: _data(cluster) == {}, timeout=WRITE * 5)
    assert not journal.holds("uid-a")


async def test_a_failed_write_fails_its_callers_and_the_next_record_writes_again(
    cluster: EmulatedCluster, api: kube.KubeClient
) -> None:
    journal = Journal(api, namespace="default", name="journal", lanes=1)
    await journal.load()
    _slow_journal(cluster)
    fault = cluster.faults.add(503, resource="configmaps", times=None)
    first = asyncio.create_task(journal.record(_with_uid("a")))
    await _writing(cluster, 1)
    second = asyncio.create_task(journal.record(_with_uid("a")))  # joins the write in flight
    for caller in (first, second):
        with pytest.raises(JournalError):
            await caller
    assert journal.writes == 1  # the second caller waited on the first's write
    cluster.faults.remove(fault)
    await journal.record(_with_uid("a"))
    assert "uid-a" in _data(cluster)
