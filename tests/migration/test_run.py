"""The migrated hostpath workload's kopf-csi flags, run against the sandbox's pieces, work.

The flags are those `kopf-csi migrate` wrote for `fixtures/hostpath.yaml` (a StatefulSet
named after the sandbox's driver), read by `kopf-csi run`'s own parser (`cli.settings_for`),
with the modules they name; only the socket and the kubeconfig are the test's (the pod's
`/csi/csi.sock` does not exist here). The operator then runs against the emulated API, the
reference driver, the KCM and snapshot-controller stand-ins, and the examples' objects
(manifests/examples) are provisioned, attached (the Pod on the node), expanded and
snapshotted (and restored).
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
import yaml

from kopf_csi import cli, rbac
from kopf_csi.modules import DEFAULT_MODULES
from kopf_csi.settings import Settings
from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.operator import running_operator
from kopf_csi.testing.snapshots import SnapshotController

from ..conftest import NODE, seed_node, until
from .conftest import containers, migrated, workload

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "manifests" / "examples"


def migrated_args() -> list[str]:
    return list(containers(workload(migrated("hostpath").text))["kopf-csi"]["args"])


def settings_and_modules(args: list[str], kubeconfig: pathlib.Path, socket: pathlib.Path) -> (
    tuple[Settings, tuple[str, ...]]
):  # fmt: skip
    settings = cli.settings_for(args, {})
    modules = tuple(a.removeprefix("--module=") for a in args if a.startswith("--module="))
    if "--no-default-modules" not in args:
        modules = DEFAULT_MODULES + modules
    settings = dataclasses.replace(
        settings,
        csi=dataclasses.replace(settings.csi, address=f"unix://{socket}", connect_timeout=10.0),
        # As the Deployment runs it: as its ServiceAccount, in its namespace (kit_rbac).
        kube=dataclasses.replace(settings.kube, kubeconfig=kubeconfig, namespace=rbac.NAMESPACE),
    )
    return settings, modules


@pytest.fixture
async def snapshot_controller(cluster: EmulatedCluster) -> AsyncIterator[SnapshotController]:
    async with SnapshotController(cluster) as controller:
        yield controller


def _examples(*names: str) -> list[dict[str, Any]]:
    return [obj for name in names for obj in yaml.safe_load_all((EXAMPLES / name).read_text())
            if obj]  # fmt: skip


def _create(cluster: EmulatedCluster, obj: dict[str, Any]) -> None:
    plural = {"StorageClass": "storageclasses", "CSIDriver": "csidrivers",
              "PersistentVolumeClaim": "persistentvolumeclaims", "Pod": "pods",
              "VolumeSnapshotClass": "volumesnapshotclasses",
              "VolumeSnapshot": "volumesnapshots"}[obj["kind"]]  # fmt: skip
    cluster.create(plural, obj, namespace=obj["metadata"].get("namespace"))


def _phase(cluster: EmulatedCluster, name: str) -> str | None:
    claim = cluster.get("persistentvolumeclaims", "default", name) or {}
    return claim.get("status", {}).get("phase")


async def test_the_migrated_flags_provision_attach_expand_and_snapshot(
    cluster: EmulatedCluster,
    operator_kubeconfig: pathlib.Path,
    kcm: Any,
    driver: Any,
    socket_path: pathlib.Path,
    snapshot_controller: SnapshotController,
) -> None:
    args = migrated_args()
    assert args == ["--csi-address=/csi/csi.sock", "--v=5"]
    settings, modules = settings_and_modules(args, operator_kubeconfig, socket_path)
    seed_node(cluster)
    for obj in _examples("csidriver.yaml", "storageclasses.yaml", "volumesnapshotclass.yaml"):
        _create(cluster, obj)
    async with running_operator(settings=settings, modules=modules):
        for obj in _examples("claims.yaml"):
            _create(cluster, obj)
        await until(lambda: _phase(cluster, "data-immediate") == "Bound", timeout=15)

        [pod] = _examples("pod.yaml")
        pod["spec"]["nodeName"] = NODE  # no scheduler here
        _create(cluster, pod)
        await until(lambda: _phase(cluster, "data-wffc") == "Bound", timeout=15)
        await until(
            lambda: len(attached := [
                va for va in cluster.objects("volumeattachments")
                if (va.get("status") or {}).get("attached")
            ]) == 2 and attached,
            timeout=15,
        )  # fmt: skip

        patch = {"spec": {"resources": {"requests": {"storage": "2Gi"}}}}
        cluster.patch("persistentvolumeclaims", "default", "data-immediate", patch)

        def expanded() -> bool:
            claim = cluster.get("persistentvolumeclaims", "default", "data-immediate") or {}
            volume = cluster.get("persistentvolumes", None, claim["spec"]["volumeName"]) or {}
            return volume.get("spec", {}).get("capacity", {}).get("storage") == "2Gi"

        await until(expanded, timeout=15)

        for obj in _examples("snapshot.yaml"):
            if obj["kind"] == "PersistentVolumeClaim":
                obj["spec"]["resources"]["requests"]["storage"] = "2Gi"
            _create(cluster, obj)

        def ready() -> bool:
            snapshot = cluster.get("volumesnapshots", "default", "data-immediate-snapshot")
            return bool(((snapshot or {}).get("status") or {}).get("readyToUse"))

        await until(ready, timeout=15)
        await until(lambda: _phase(cluster, "data-restored") == "Bound", timeout=15)
    assert len(driver.state.volumes) == 3
    assert len(driver.state.snapshots) == 1
