"""The back-end contract end to end: what each answer of `provision` and `delete` makes the
controller do, through kopf and the emulated API, with no CSI driver.

We test: `should_provision` False leaves a claim alone (no event, no PV); `supports_block`
lets Block claims through; `IN_BACKGROUND` keeps a deleted claim in progress until its volume is
made, then released and deleted (nothing lost); an infeasible failure posts the library's
message and is retried after the maximum delay; an exception (a bug) is retried without a
failure event, and a claim deleted meanwhile is still finished and deleted (nothing lost); a
failed `delete` posts `VolumeFailedDelete` and is retried; `should_delete` False keeps a
Released PV; the field manager of the back end's writes is the registered one;
the provisioning metrics count the back end's volumes.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from kopf_csi import names
from kopf_csi.provisioning.backends import ProvisionResult
from kopf_csi.settings import CSISettings, ProvisionerOptions, Settings
from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.operator import DEFAULT_MODULES, OperatorThread, running_operator
from tests.backends import state
from tests.backends.memory_backend import NAME

from ..conftest import until

NAMESPACE = "default"
RETRY_MAX = 0.5


@pytest.fixture(autouse=True)
def script() -> Iterator[None]:
    state.reset()
    yield
    state.reset()


@pytest.fixture
def settings(settings: Settings) -> Settings:
    options = ProvisionerOptions(retry_interval_start=0.05, retry_interval_max=RETRY_MAX)
    return dataclasses.replace(settings, csi=CSISettings(disabled=True), provisioner=options)


@pytest.fixture
async def operator(settings: Settings, cluster: EmulatedCluster) -> AsyncIterator[OperatorThread]:
    cluster.create(
        "storageclasses",
        {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "mem"},
         "provisioner": NAME, "reclaimPolicy": "Delete", "volumeBindingMode": "Immediate"},
    )  # fmt: skip
    modules = (*DEFAULT_MODULES, "tests.backends.memory_backend")
    async with running_operator(settings=settings, modules=modules) as operator:
        yield operator


def claim(cluster: EmulatedCluster, name: str, *, labels: dict[str, str] | None = None,
          **spec: Any) -> str:  # fmt: skip
    created = cluster.create(
        "persistentvolumeclaims",
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
         "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels or {}},
         "spec": {"storageClassName": "mem", "accessModes": ["ReadWriteOnce"],
                  "resources": {"requests": {"storage": "1Mi"}}, **spec}},
    )  # fmt: skip
    return f"pvc-{created['metadata']['uid']}"


def phase(cluster: EmulatedCluster, resource: str, name: str) -> str | None:
    found = cluster.get(resource, NAMESPACE if resource != "persistentvolumes" else None, name)
    return None if found is None else found.get("status", {}).get("phase")


def events_of(cluster: EmulatedCluster, name: str, reason: str) -> list[dict[str, Any]]:
    return [
        event
        for event in cluster.objects("events")
        if event.get("involvedObject", {}).get("name") == name and event.get("reason") == reason
    ]


async def test_a_claim_the_qualifier_declines_is_left_alone_and_block_goes_through(
    cluster: EmulatedCluster, kcm: Any, operator: OperatorThread
) -> None:
    claim(cluster, "skipped", labels={"skip": "yes"})
    block = claim(cluster, "raw", volumeMode="Block")
    await until(lambda: phase(cluster, "persistentvolumeclaims", "raw") == "Bound")
    volume = cluster.get("persistentvolumes", None, block)
    assert volume is not None
    assert volume["spec"]["volumeMode"] == "Block"
    assert volume["spec"]["nfs"] == {"server": "memory", "path": f"/{block}"}
    writers = {entry["manager"] for entry in volume["metadata"]["managedFields"]}
    assert "memory-provisioner" in writers
    await asyncio.sleep(0.3)
    await operator.flush_events()  # events go out in the background: all posted by now
    assert events_of(cluster, "skipped", "Provisioning") == []
    assert phase(cluster, "persistentvolumeclaims", "skipped") == "Pending"
    assert list(state.MADE) == [block]


async def test_in_background_keeps_a_deleted_claim_until_its_volume_is_made_and_deleted(
    cluster: EmulatedCluster, kcm: Any, operator: OperatorThread
) -> None:
    state.SCRIPT["slow"] = [ProvisionResult.in_background("still creating")] * 5
    volume = claim(cluster, "slow")
    await until(lambda: events_of(cluster, "slow", "ProvisioningFailed"))
    assert events_of(cluster, "slow", "ProvisioningFailed")[0]["message"] == "still creating"
    cluster.delete("persistentvolumeclaims", NAMESPACE, "slow")
    await until(lambda: [volume] == state.DELETED, timeout=15)  # made, released, deleted
    assert {volume: 1} == state.MADE
    await until(lambda: cluster.get("persistentvolumes", None, volume) is None)


async def test_an_infeasible_failure_is_retried_after_the_maximum_delay(
    cluster: EmulatedCluster, kcm: Any, operator: OperatorThread
) -> None:
    state.SCRIPT["odd"] = [ProvisionResult.infeasible_request("size must be even")]
    claim(cluster, "odd")
    failed = await until(lambda: events_of(cluster, "odd", "ProvisioningFailed"))
    assert failed[0]["message"] == names.MESSAGE_INFEASIBLE.format(error="size must be even")
    await until(lambda: phase(cluster, "persistentvolumeclaims", "odd") == "Bound")
    attempts = events_of(cluster, "odd", "Provisioning")[0].get("count", 1)
    assert attempts == 2  # once failed, once more only after the slow retry


async def test_a_bug_in_provision_is_retried_without_a_failure_event(
    cluster: EmulatedCluster, kcm: Any, operator: OperatorThread
) -> None:
    state.SCRIPT["buggy"] = [KeyError("oops")]
    claim(cluster, "buggy")
    await until(lambda: phase(cluster, "persistentvolumeclaims", "buggy") == "Bound")
    assert events_of(cluster, "buggy", "ProvisioningFailed") == []


async def test_a_failed_delete_is_an_event_and_a_retry_and_the_guard_keeps_volumes(
    cluster: EmulatedCluster, kcm: Any, operator: OperatorThread
) -> None:
    busy = claim(cluster, "busy")
    kept = claim(cluster, "kept", labels={"keep": "yes"})
    state.DELETE_SCRIPT[busy] = [OSError("device busy")]
    await until(lambda: phase(cluster, "persistentvolumeclaims", "busy") == "Bound")
    await until(lambda: phase(cluster, "persistentvolumeclaims", "kept") == "Bound")
    cluster.delete("persistentvolumeclaims", NAMESPACE, "busy")
    cluster.delete("persistentvolumeclaims", NAMESPACE, "kept")
    await until(lambda: cluster.get("persistentvolumes", None, busy) is None)
    failed = events_of(cluster, busy, "VolumeFailedDelete")
    assert [event["message"] for event in failed] == ["device busy"]
    assert [busy] == state.DELETED
    assert phase(cluster, "persistentvolumes", kept) == "Released"


async def test_the_metrics_count_the_back_ends_volumes(
    cluster: EmulatedCluster, kcm: Any, operator: OperatorThread
) -> None:
    claim(cluster, "counted")
    await until(lambda: phase(cluster, "persistentvolumeclaims", "counted") == "Bound")
    text = operator.memo.metrics.exposition().decode()
    assert f'{names.METRIC_PROVISION_TOTAL}{{class="mem",source=""}} 1.0' in text


async def test_a_claim_deleted_while_provision_raises_is_finished_and_deleted(
    cluster: EmulatedCluster, kcm: Any, operator: OperatorThread
) -> None:
    """A bug (an exception) may leave half-made storage, as `IN_BACKGROUND` does: a claim
    deleted meanwhile is provisioned to the end and its volume deleted, nothing left."""
    state.SCRIPT["buggy"] = [OSError("disk hiccup")] * 3
    volume = claim(cluster, "buggy")
    await until(lambda: len(state.SCRIPT["buggy"]) < 3)  # its first attempt raised
    cluster.delete("persistentvolumeclaims", NAMESPACE, "buggy")
    await until(lambda: [volume] == state.DELETED, timeout=15)  # made, released, deleted
    assert {volume: 1} == state.MADE
    await until(lambda: cluster.get("persistentvolumes", None, volume) is None)
