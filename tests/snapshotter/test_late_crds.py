"""Snapshot CRDs installed after the operator started: served after a restart, as documented.

kopf's runtime observation of CRDs is off (it needs RBAC on every CRD; docs/operations.md,
"RBAC"), and the snapshotter decides at start-up whether the API is there. We test:
- without the snapshot API at start, the operator starts, provisions, and warns once that the
  snapshotter is off, saying to restart it after installing the CRDs;
- the CRDs installed later are not picked up: no request for the snapshot kinds at all;
- after a restart, a snapshot taken meanwhile is made and becomes ready.
"""

from __future__ import annotations

import asyncio
import pathlib
from collections.abc import AsyncIterator

import pytest
import structlog
import yaml

from kopf_csi.driver import Driver
from kopf_csi.settings import Settings
from kopf_csi.testing import permissions
from kopf_csi.testing.emulator import KINDS, EmulatedCluster
from kopf_csi.testing.operator import running_operator
from kopf_csi.testing.snapshots import SnapshotController

from .conftest import make_class, make_snapshot, source_claim, until
from .test_snapshots import ready_content

SNAPSHOTS = "snapshot.storage.k8s.io"
SNAPSHOT_KINDS = tuple(kind for kind in KINDS if kind.group == SNAPSHOTS)
CRDS = [
    yaml.safe_load(path.read_text())
    for path in sorted((pathlib.Path(__file__).parents[2] / "manifests" / "crds").glob("volume*"))
]


@pytest.fixture
async def cluster(
    kit_rbac: bool, handler_modules: tuple[str, ...]
) -> AsyncIterator[EmulatedCluster]:
    rbac = permissions.cluster_arguments(kit_rbac=kit_rbac, handler_modules=handler_modules)
    kinds = tuple(k for k in KINDS if k not in SNAPSHOT_KINDS)
    async with EmulatedCluster(kinds=kinds, **rbac) as cluster:
        yield cluster


async def test_crds_installed_later_are_served_after_a_restart(
    cluster: EmulatedCluster,
    settings: Settings,
    handler_modules: tuple[str, ...],
    driver: Driver,
    kcm: object,
) -> None:
    with structlog.testing.capture_logs() as logs:
        async with running_operator(settings=settings, modules=handler_modules) as operator:
            await source_claim(cluster, operator)
            off = [entry for entry in logs if entry["event"] == "snapshotter_off"]
            assert len(off) == 1
            assert off[0]["log_level"] == "warning"
            assert "restart the operator" in off[0]["hint"]
            for crd in CRDS:  # the CRDs are installed and established
                cluster.create("customresourcedefinitions", crd)
            for kind in SNAPSHOT_KINDS:
                cluster.serve(kind)
            cluster.requests.clear()  # the snapshotter's one look at start-up (404) is past
            async with SnapshotController(cluster):
                make_class(cluster)
                snap = make_snapshot(cluster)
                await until(lambda: cluster.objects("volumesnapshotcontents"))
                await asyncio.sleep(1.0)  # what is not done cannot be waited for
                assert not [access for access in cluster.requests if access.group == SNAPSHOTS]
        async with (
            running_operator(settings=settings, modules=handler_modules),
            SnapshotController(cluster),
        ):
            found = await ready_content(cluster, snap)
    assert found["status"]["readyToUse"] is True
