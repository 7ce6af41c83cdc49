"""kopf against the emulator: the finalizer round trip that kmock 0.8 alone cannot serve.

kopf adds and removes its finalizer with a JSON patch guarded by
``test /metadata/resourceVersion`` and then waits for that resourceVersion in its watch
(stack-notes): this needs resourceVersions, 422 on a failed test, and watch resumption.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import kopf
import pytest

from kopf_csi.testing.emulator import EmulatedCluster

FINALIZER = "test.kopf-csi.dev/finalizer"
RunKopf = Callable[[kopf.OperatorRegistry], AbstractAsyncContextManager[None]]


@pytest.fixture
def storage_protection() -> bool:
    return False  # claims are a sample kind here: no admission finalizers to account for


async def test_kopf_adds_and_removes_its_finalizer(
    cluster: EmulatedCluster, run_kopf: RunKopf
) -> None:
    registry = kopf.OperatorRegistry()
    created, deleted = asyncio.Event(), asyncio.Event()
    loop = asyncio.get_running_loop()

    @kopf.on.create("persistentvolumeclaims", id="test.create", registry=registry)
    def on_create(**_: Any) -> None:
        loop.call_soon_threadsafe(created.set)

    @kopf.on.delete("persistentvolumeclaims", id="test.delete", registry=registry)
    def on_delete(**_: Any) -> None:
        loop.call_soon_threadsafe(deleted.set)

    # One object exists before kopf starts (listed), one is created while it watches.
    cluster.create("persistentvolumeclaims", {"metadata": {"name": "early", "namespace": "ns1"}})
    async with run_kopf(registry):
        cluster.create("persistentvolumeclaims", {"metadata": {"name": "late", "namespace": "ns2"}})
        for namespace, name in (("ns1", "early"), ("ns2", "late")):
            obj = await cluster.wait_for(
                "persistentvolumeclaims",
                namespace,
                name,
                lambda obj: FINALIZER in ((obj or {}).get("metadata", {}).get("finalizers") or []),
            )
            assert obj is not None
        await asyncio.wait_for(created.wait(), 10)

        deleting = cluster.delete("persistentvolumeclaims", "ns2", "late")
        assert deleting["metadata"]["deletionTimestamp"]  # held by kopf's finalizer
        gone = await cluster.wait_for(
            "persistentvolumeclaims", "ns2", "late", lambda obj: obj is None
        )
        assert gone is None
        assert deleted.is_set()
    assert cluster.get("persistentvolumeclaims", "ns1", "early") is not None
