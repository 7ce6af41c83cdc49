"""Fixtures and helpers of the csi-snapshotter's end-to-end tests.

Everything runs for real: kopf with lifecycle, caches, provisioner and snapshotter in its own
thread, the emulated API over HTTP, the KCM stand-in (binding claims), the snapshot-controller
stand-in (`kopf_csi.testing.snapshots`: VolumeSnapshot → VolumeSnapshotContent), and the
reference driver over its unix socket. Here:

- fast settings: a 1 s CSI timeout and retries from 0.05 s up to 0.5 s (Go: 1m, 1s .. 5min);
  `snapshotter_options` and `driver_options` take an indirect parameter to change them;
- the driver spies `calls` and `secrets_seen` come from `kopf_csi.testing.spies`;
- helpers to make classes, claims, snapshots and secrets, to cut a snapshot on the driver
  directly (`driver_snapshot`), and to read contents.
"""

from __future__ import annotations

import base64
import dataclasses
import pathlib
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest

from kopf_csi import names
from kopf_csi.csi import CSIClient
from kopf_csi.csi import messages as csi
from kopf_csi.driver import DriverConfig
from kopf_csi.settings import CSISettings, ProvisionerOptions, Settings, SnapshotterOptions
from kopf_csi.testing.emulator import Body, EmulatedCluster
from kopf_csi.testing.snapshots import SnapshotController, content_name

from ..conftest import DRIVER_NAME, NODE, seed_node, until
from ..provisioner.conftest import make_claim, make_storage_class, settled, wait_for_bound

__all__ = [
    "DRIVER_NAME",
    "NAMESPACE",
    "content",
    "content_name",
    "driver_snapshot",
    "make_claim",
    "make_class",
    "make_secret",
    "make_snapshot",
    "make_storage_class",
    "snapshot",
    "until",
    "wait_for_bound",
]

NAMESPACE = "default"
FAST = SnapshotterOptions(timeout=1.0, retry_interval_start=0.05, retry_interval_max=0.5)


@pytest.fixture
def driver_options(request: pytest.FixtureRequest) -> dict[str, Any]:
    return dict(getattr(request, "param", {}))


@pytest.fixture
def snapshotter_options(request: pytest.FixtureRequest) -> SnapshotterOptions:
    return getattr(request, "param", FAST)


@pytest.fixture
def driver_config(tmp_path: pathlib.Path, driver_options: dict[str, Any]) -> DriverConfig:
    config = DriverConfig(
        node_id=NODE, data_dir=tmp_path / "driver", known_nodes=None, durable=False
    )
    return dataclasses.replace(config, **driver_options)


@pytest.fixture
def handler_modules() -> tuple[str, ...]:
    return (
        "kopf_csi_handlers.lifecycle",
        "kopf_csi_handlers.caches",
        "kopf_csi_handlers.provisioner",
        "kopf_csi_handlers.snapshotter",
    )


@pytest.fixture
def settings(settings: Settings, snapshotter_options: SnapshotterOptions) -> Settings:
    csi = CSISettings(address=settings.csi.address, timeout=1.0, connect_timeout=10.0)
    provisioner = ProvisionerOptions(retry_interval_start=0.05, retry_interval_max=0.5)
    return dataclasses.replace(
        settings, csi=csi, provisioner=provisioner, snapshotter=snapshotter_options
    )


@pytest.fixture(autouse=True)
def node(cluster: EmulatedCluster) -> str:
    seed_node(cluster)
    return NODE


@pytest.fixture
async def snapshots(cluster: EmulatedCluster) -> AsyncIterator[SnapshotController]:
    async with SnapshotController(cluster) as controller:
        yield controller
    await settled(cluster)


def make_class(
    cluster: EmulatedCluster,
    name: str = "snapclass",
    *,
    policy: str = "Delete",
    parameters: Mapping[str, str] | None = None,
    default: bool = False,
    driver: str = DRIVER_NAME,
) -> Body:
    metadata: dict[str, Any] = {"name": name}
    if default:
        metadata["annotations"] = {"snapshot.storage.kubernetes.io/is-default-class": "true"}
    body: dict[str, Any] = {
        "apiVersion": "snapshot.storage.k8s.io/v1",
        "kind": "VolumeSnapshotClass",
        "metadata": metadata,
        "driver": driver,
        "deletionPolicy": policy,
    }
    if parameters is not None:
        body["parameters"] = dict(parameters)
    return cluster.create("volumesnapshotclasses", body)


def make_snapshot(
    cluster: EmulatedCluster,
    name: str = "snap",
    claim: str = "source",
    *,
    cls: str | None = "snapclass",
) -> Body:
    spec: dict[str, Any] = {"source": {"persistentVolumeClaimName": claim}}
    if cls is not None:
        spec["volumeSnapshotClassName"] = cls
    body = {
        "apiVersion": "snapshot.storage.k8s.io/v1",
        "kind": "VolumeSnapshot",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": spec,
    }
    return cluster.create("volumesnapshots", body)


def make_secret(
    cluster: EmulatedCluster, name: str, data: Mapping[str, str], namespace: str = NAMESPACE
) -> Body:
    encoded = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "data": encoded,
    }
    return cluster.create("secrets", body)


def snapshot(cluster: EmulatedCluster, name: str = "snap") -> Body | None:
    return cluster.get("volumesnapshots", NAMESPACE, name)


def content(cluster: EmulatedCluster, snap: Body | str) -> Body | None:
    name = snap if isinstance(snap, str) else content_name(snap)
    return cluster.get("volumesnapshotcontents", None, name)


async def source_claim(
    cluster: EmulatedCluster, operator: Any, name: str = "source", *, size: str = "1Mi"
) -> Body:
    """A StorageClass `sc` and a bound claim to snapshot; returns its PV."""
    if cluster.get("storageclasses", None, "sc") is None:
        await make_storage_class(cluster, operator)
    return await wait_for_bound(cluster, make_claim(cluster, name, size=size))


async def ready_content(cluster: EmulatedCluster, snap: Body, *, timeout: float = 10.0) -> Body:
    """Wait until the content is ready and settled: the being-created annotation is removed
    right after the ready status is written, as upstream orders it."""

    def ready() -> Body | None:
        found = content(cluster, snap)
        if not found or not (found.get("status") or {}).get("readyToUse"):
            return None
        annotations = found["metadata"].get("annotations") or {}
        return None if names.ANN_SNAPSHOT_BEING_CREATED in annotations else found

    found: Body = await until(ready, timeout=timeout)
    return found


async def driver_snapshot(socket_path: pathlib.Path, volume: str, name: str) -> str:
    """A snapshot cut on the driver directly (as for a pre-provisioned content): its id."""
    async with CSIClient(str(socket_path)) as client:
        answer = await client.create_snapshot(
            csi.CreateSnapshotRequest(name=name, source_volume_id=volume)
        )
    assert answer.snapshot is not None
    return answer.snapshot.snapshot_id
