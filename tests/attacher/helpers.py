"""Objects and waits shared by the attacher's end-to-end tests."""

from __future__ import annotations

import asyncio
import pathlib
import time
from collections.abc import Callable
from typing import Any

from kopf_csi.csi import CSIClient
from kopf_csi.csi import messages as csi
from kopf_csi.testing.emulator import EmulatedCluster, Subscription
from kopf_csi.testing.operator import OperatorThread

from ..conftest import DRIVER_NAME, NODE

FINALIZER = "external-attacher/hostpath-csi-kopf-dev"
NODE_ID_ANNOTATION = "csi.alpha.kubernetes.io/node-id"
Body = dict[str, Any]


async def until(predicate: Callable[[], Any], *, timeout: float = 5.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"not true within {timeout}s: {predicate}")
        await asyncio.sleep(0.01)


def seed_node(cluster: EmulatedCluster, *, node: str = NODE, node_id: str | None = None) -> None:
    """The CSINode that maps the node to our driver's node ID."""
    drivers = [{"name": DRIVER_NAME, "nodeID": node_id or node}]
    cluster.create(
        "csinodes",
        {"apiVersion": "storage.k8s.io/v1", "kind": "CSINode", "metadata": {"name": node},
         "spec": {"drivers": drivers}},
    )  # fmt: skip


async def create_volume(socket_path: pathlib.Path, name: str, *, block: bool = False) -> str:
    """A volume on the driver, made behind the operator's back; its volume ID."""
    access = csi.VolumeCapabilityAccessMode(
        mode=csi.VolumeCapabilityAccessModeMode.SINGLE_NODE_WRITER
    )
    if block:
        capability = csi.VolumeCapability(
            block=csi.VolumeCapabilityBlockVolume(), access_mode=access
        )
    else:
        mount = csi.VolumeCapabilityMountVolume()
        capability = csi.VolumeCapability(mount=mount, access_mode=access)
    request = csi.CreateVolumeRequest(
        name=name,
        capacity_range=csi.CapacityRange(required_bytes=1024 * 1024),
        volume_capabilities=[capability],
    )
    async with CSIClient(str(socket_path)) as client:
        response = await client.create_volume(request)
    assert response.volume is not None
    return response.volume.volume_id


def volume(name: str, handle: str, **csi_source: Any) -> Body:
    spec: Body = {
        "capacity": {"storage": "1Mi"},
        "accessModes": csi_source.pop("access_modes", ["ReadWriteOnce"]),
        "persistentVolumeReclaimPolicy": "Retain",
        "csi": {"driver": DRIVER_NAME, "volumeHandle": handle, **csi_source},
    }
    if csi_source.get("volumeMode"):
        spec["volumeMode"] = spec["csi"].pop("volumeMode")
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": spec,
    }


def attachment(name: str, pv_name: str, *, node: str = NODE, **metadata: Any) -> Body:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "VolumeAttachment",
        "metadata": {"name": name, **metadata},
        "spec": {
            "attacher": DRIVER_NAME,
            "nodeName": node,
            "source": {"persistentVolumeName": pv_name},
        },
    }


async def attached_volume(
    cluster: EmulatedCluster, socket_path: pathlib.Path, name: str, **csi_source: Any
) -> tuple[str, Body]:
    """A driver volume and its PV: (volume ID, PV)."""
    handle = await create_volume(socket_path, name, block=csi_source.get("volumeMode") == "Block")
    pv = cluster.create("persistentvolumes", volume(name, handle, **csi_source))
    return handle, pv


def va(cluster: EmulatedCluster, name: str) -> Body:
    return cluster.get("volumeattachments", None, name) or {}


def status(cluster: EmulatedCluster, name: str) -> Body:
    return va(cluster, name).get("status") or {}


async def cached(operator: OperatorThread, kind: str, name: str) -> None:
    """Wait until the operator's cache has the object (its watch event has arrived)."""
    caches = operator.memo.caches
    await until(lambda: name in getattr(caches, kind))


async def next_matching(
    feed: Subscription, predicate: Callable[[Body], Any], *, timeout: float = 5.0
) -> Body:
    """The next committed object in the feed that matches: no state can slip between polls."""
    async with asyncio.timeout(timeout):
        async for change in feed:
            if predicate(change.object):
                return change.object
    raise AssertionError("the feed closed")


def has_status(field: str) -> Callable[[Body], Any]:
    return lambda obj: (obj.get("status") or {}).get(field)
