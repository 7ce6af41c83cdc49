"""docs/migration.md's commands, run in order against the sandbox's emulated API server.

Plain kubectl (skipped, saying so, without it) and the installed `kopf-csi` run every ```sh
block of the guide in one working directory, with KUBECONFIG pointing at the emulated cluster,
where the cloud block driver's chart (`fixtures/cloud-block.yaml`) was applied first, as its
users have it. We test these aspects:
- the guide's blocks are the ones this test knows (a new block needs its check here);
- every command succeeds;
- after "Migrate" the live Deployment has the driver, kopf-csi and the livenessprobe, and the
  added RBAC exists; after "Roll back" the Deployment has its Go sidecars again, as the chart
  wrote them, and the added RBAC is gone.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import re
import shutil
import sys
from collections.abc import AsyncIterator

import pytest

from kopf_csi.testing import kinds, openapi
from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.kinds import KINDS, Kind

from .conftest import FIXTURES, containers, text_of, workload

ROOT = pathlib.Path(__file__).resolve().parents[2]
KUBECTL = shutil.which("kubectl")
BLOCK = re.compile(r"^```sh\n(.*?)^```", re.DOTALL | re.MULTILINE)
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="needs the kubectl binary (not on PATH)")


# The kinds of a driver's chart the emulator does not serve by itself (the operator needs
# none of them), with the fields the chart writes.
CHART_KINDS = (
    Kind("apps", "v1", "deployments", "Deployment", True, status=True),
    Kind("", "v1", "serviceaccounts", "ServiceAccount", True),
    Kind("", "v1", "services", "Service", True, status=True),
    Kind("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True, status=True),
    Kind("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False),
    Kind("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False),
    Kind("rbac.authorization.k8s.io", "v1", "roles", "Role", True),
    Kind("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True),
)
CHART_FIELDS = {
    ("", "ServiceAccount"): {},
    ("rbac.authorization.k8s.io", "ClusterRole"): {"rules": [openapi.ANY]},
    ("rbac.authorization.k8s.io", "Role"): {"rules": [openapi.ANY]},
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"): {
        "subjects": [openapi.ANY], "roleRef": openapi.ANY,
    },
    ("rbac.authorization.k8s.io", "RoleBinding"): {
        "subjects": [openapi.ANY], "roleRef": openapi.ANY,
    },
}  # fmt: skip


@pytest.fixture
async def cluster(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[EmulatedCluster]:
    monkeypatch.setattr(openapi, "FIELDS", {**openapi.FIELDS, **CHART_FIELDS})
    groups = {kind.group for kind in CHART_KINDS}  # built in: strategic merge patches
    monkeypatch.setattr(kinds, "_BUILT_IN_GROUPS", frozenset(kinds._BUILT_IN_GROUPS) | groups)
    async with EmulatedCluster(kinds=KINDS + CHART_KINDS) as cluster:
        yield cluster


def guide_blocks() -> list[str]:
    return BLOCK.findall((ROOT / "docs" / "migration.md").read_text())


def test_the_guide_has_the_blocks_this_test_checks() -> None:
    firsts = [block.splitlines()[0].split()[:3] for block in guide_blocks()]
    assert firsts == [
        ["kubectl", "get", "deployment"],
        ["kopf-csi", "migrate", "before.yaml"],
        ["kubectl", "get", "leases"],
        ["kopf-csi", "migrate", "--back"],
    ]


async def _bash(script: str, cwd: pathlib.Path, env: dict[str, str]) -> str:
    process = await asyncio.create_subprocess_exec(
        "bash", "-euo", "pipefail", "-c", script, cwd=cwd, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, f"{script}\n---\n{out.decode()}"
    return out.decode()


def _names(cluster: EmulatedCluster) -> list[str]:
    deployment = cluster.get("deployments", "kube-system", "blockstore-csi-controller")
    assert deployment is not None
    return [c["name"] for c in deployment["spec"]["template"]["spec"]["containers"]]


def _added(cluster: EmulatedCluster) -> list[str]:
    return [
        obj["metadata"]["name"]
        for kind in ("clusterroles", "clusterrolebindings")
        for obj in cluster.objects(kind)
        if (obj["metadata"].get("labels") or {}).get("app.kubernetes.io/managed-by")
        == "kopf-csi-migrate"
    ]


async def test_the_guides_commands_migrate_and_roll_back(
    cluster: EmulatedCluster, kubeconfig: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    bin_dir = pathlib.Path(sys.executable).parent
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("KOPF_CSI_")},
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "KUBECONFIG": str(kubeconfig),
        "HOME": str(tmp_path),  # kubectl's cache
    }
    await _bash(f"kubectl apply -f {FIXTURES / 'cloud-block.yaml'}", tmp_path, env)
    original = containers(workload(text_of("cloud-block")))
    assert _names(cluster) == list(original)

    look, migrate, watch, back = guide_blocks()
    out = await _bash(look, tmp_path, env)
    assert "would change:" in out
    assert "-> kopf-csi" in out

    await _bash(migrate, tmp_path, env)
    assert _names(cluster) == ["blockstore-plugin", "kopf-csi", "liveness-probe"]
    assert _added(cluster) == ["kopf-csi-kube-system-blockstore-csi-controller-sa"] * 2

    out = await _bash(watch, tmp_path, env)
    assert "blockstore-plugin kopf-csi liveness-probe" in out

    out = await _bash(back, tmp_path, env)
    assert " ".join(original) in out
    assert _names(cluster) == list(original)
    live = cluster.get("deployments", "kube-system", "blockstore-csi-controller")
    assert live is not None
    assert live["spec"]["template"]["spec"]["containers"] == list(original.values())
    assert not _added(cluster)
