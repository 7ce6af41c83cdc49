"""Fixtures of the resizer's end-to-end tests: fast settings, a driver, claims to grow.

Everything runs for real: kopf with the lifecycle, caches, provisioner, attacher and resizer
modules in its own thread, the emulated API over HTTP, the KCM stand-in, and the reference
driver over its unix socket. `driver_options` and `resizer_options` take an indirect parameter
(`@pytest.mark.parametrize("driver_options", [{...}], indirect=True)`).

The retry intervals are short (50 ms doubling to 1 s), so the slow retry after an infeasible
error is 1 s here (5 min in Go); the resync never fires within a test.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any

import pytest

from kopf_csi.driver import DriverConfig, Features
from kopf_csi.resizing.options import ResizerOptions
from kopf_csi.settings import ProvisionerOptions, Settings
from kopf_csi.testing.emulator import Body, EmulatedCluster
from kopf_csi.testing.operator import OperatorThread

from ..conftest import NODE, seed_node
from ..provisioner.conftest import (
    make_claim,
    make_storage_class,
    settled,
    wait_for_bound,
    wait_until,
)

FAST_RESIZER = ResizerOptions(
    timeout=2.0, retry_interval_start=0.05, retry_interval_max=1.0, resync_period=1000.0
)
NAMESPACE = "default"


@pytest.fixture
def driver_options(request: pytest.FixtureRequest) -> dict[str, Any]:
    return dict(getattr(request, "param", {}))


@pytest.fixture
def resizer_options(request: pytest.FixtureRequest) -> ResizerOptions:
    return getattr(request, "param", FAST_RESIZER)


@pytest.fixture
def driver_config(tmp_path: pathlib.Path, driver_options: dict[str, Any]) -> DriverConfig:
    options = dict(driver_options)
    features = Features(attach=True, **options.pop("features", {}))
    config = DriverConfig(
        node_id=NODE,
        data_dir=tmp_path / "driver",
        known_nodes=None,
        features=features,
        durable=False,
    )
    return dataclasses.replace(config, **options)


@pytest.fixture
def handler_modules() -> tuple[str, ...]:
    return (
        "kopf_csi_handlers.lifecycle",
        "kopf_csi_handlers.caches",
        "kopf_csi_handlers.provisioner",
        "kopf_csi_handlers.attacher",
        "kopf_csi_handlers.resizer",
    )


@pytest.fixture
def settings(settings: Settings, resizer_options: ResizerOptions) -> Settings:
    return dataclasses.replace(
        settings,
        csi=dataclasses.replace(settings.csi, timeout=2.0),
        provisioner=ProvisionerOptions(retry_interval_start=0.05, retry_interval_max=0.5),
        resizer=resizer_options,
    )


@pytest.fixture(autouse=True)
def node(cluster: EmulatedCluster) -> str:
    seed_node(cluster)
    return NODE


@pytest.fixture
async def operator(operator: OperatorThread, cluster: EmulatedCluster, kcm: Any) -> Any:
    yield operator
    await settled(cluster)


# --- helpers ---------------------------------------------------------------------------------


async def bound_claim(
    cluster: EmulatedCluster,
    operator: OperatorThread,
    name: str = "data",
    *,
    size: str = "1Mi",
    volume_mode: str | None = None,
) -> tuple[Body, Body]:
    """A claim provisioned by the operator and bound by the KCM stand-in: (claim, PV)."""
    if cluster.get("storageclasses", None, "sc") is None:
        await make_storage_class(cluster, operator)
    claim = make_claim(cluster, name, size=size, volume_mode=volume_mode)
    pv = await wait_for_bound(cluster, claim)
    await wait_until(lambda: operator.memo.caches.volumes.get(pv["metadata"]["name"]))
    fresh = cluster.get("persistentvolumeclaims", NAMESPACE, name)
    assert fresh is not None
    return fresh, pv


def grow(cluster: EmulatedCluster, name: str, size: str) -> Body:
    patch = {"spec": {"resources": {"requests": {"storage": size}}}}
    return cluster.patch("persistentvolumeclaims", NAMESPACE, name, patch)


def claim_of(cluster: EmulatedCluster, name: str = "data") -> Body:
    found = cluster.get("persistentvolumeclaims", NAMESPACE, name)
    assert found is not None
    return found


def pv_of(cluster: EmulatedCluster, name: str) -> Body:
    found = cluster.get("persistentvolumes", None, name)
    assert found is not None
    return found


def status_of(cluster: EmulatedCluster, name: str = "data") -> Body:
    return claim_of(cluster, name).get("status") or {}


def conditions_of(cluster: EmulatedCluster, name: str = "data") -> dict[str, Body]:
    return {c["type"]: c for c in status_of(cluster, name).get("conditions") or ()}


def resize_status(cluster: EmulatedCluster, name: str = "data") -> str | None:
    return (status_of(cluster, name).get("allocatedResourceStatuses") or {}).get("storage")


def events_of(cluster: EmulatedCluster, obj: Body, reason: str | None = None) -> list[Body]:
    uid = obj["metadata"]["uid"]
    found = [
        e
        for e in cluster.objects("events")
        if e["involvedObject"].get("uid") == uid and (reason is None or e["reason"] == reason)
    ]
    return sorted(found, key=lambda e: int(e["metadata"]["resourceVersion"]))


def messages(cluster: EmulatedCluster, obj: Body, reason: str) -> list[str]:
    return [e["message"] for e in events_of(cluster, obj, reason)]
