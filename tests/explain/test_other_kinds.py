"""explain for PVs and VolumeAttachments, and explain's own failures (exit code 2), end to end."""

from __future__ import annotations

import asyncio
import json
import pathlib
import shutil
import sys
from typing import Any

from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.operator import OperatorThread

from ..provisioner.conftest import make_claim, make_pod, make_storage_class, wait_for_bound
from .conftest import run_explain, until_explained


async def test_a_bound_volume_and_its_attachment_are_healthy(
    cluster: EmulatedCluster, kcm: Any, operator: OperatorThread, explain: Any
) -> None:
    await make_storage_class(cluster, operator)
    volume = await wait_for_bound(cluster, make_claim(cluster))
    name = volume["metadata"]["name"]
    found = await until_explained(explain, f"pv/{name}", "")
    assert found.text.first_line == f"OK: persistentvolume/{name}: the volume is Bound"
    assert found.text.evidence[:2] == [
        f"PersistentVolume {name}: phase Bound, reclaim policy Delete",
        "claim: default/data",
    ]
    make_pod(cluster, "app", "data")
    va = await until_explained(explain, "pvc/default/data", "")
    attachment = next(line for line in va.text.evidence if line.startswith("VolumeAttachment "))
    va_name = attachment.split()[1].rstrip(":")
    found = await until_explained(explain, f"volumeattachments/{va_name}", "")
    assert found.json["summary"] == "attached to node node-1"
    assert found.text.code == 0


async def test_a_volume_held_by_another_controllers_finalizer(
    cluster: EmulatedCluster, kcm: Any, operator: OperatorThread, explain: Any
) -> None:
    cluster.create(
        "persistentvolumes",
        {"apiVersion": "v1", "kind": "PersistentVolume",
         "metadata": {"name": "held", "finalizers": ["backup.example.com/protect"]},
         "spec": {"capacity": {"storage": "1Mi"}, "accessModes": ["ReadWriteOnce"],
                  "persistentVolumeReclaimPolicy": "Retain",
                  "hostPath": {"path": "/tmp/held"}}},
    )  # fmt: skip
    cluster.delete("persistentvolumes", None, "held")
    found = await until_explained(explain, "pv/held", "foreign-finalizer")
    assert found.json["summary"] == (
        "the deletion waits for another controller's finalizer: backup.example.com/protect"
    )
    assert "being deleted; finalizers: backup.example.com/protect" in found.text.evidence[-1]
    assert found.text.code == 1


async def test_a_wrong_name_is_one_clear_line(
    cluster: EmulatedCluster, kubeconfig: pathlib.Path
) -> None:
    run = await run_explain("pvc/default/nothing", "--kubeconfig", str(kubeconfig))
    assert run.code == 2
    assert run.stdout == ""
    assert run.stderr == (
        'kopf-csi explain: error: persistentvolumeclaim "nothing" not found'
        ' in namespace "default"\n'
    )
    run = await run_explain("pvc/default/nothing", "--kubeconfig", str(kubeconfig), "-o", "json")
    assert json.loads(run.stdout)["state"] == "error"
    assert run.code == 2
    run = await run_explain("pods/default/x", "--kubeconfig", str(kubeconfig))
    assert run.code == 2
    assert len(run.stderr.splitlines()) == 1
    assert "cannot explain 'pods'" in run.stderr
    # One object at a time: two targets are not "pvc/default/nothing/pv/x".
    run = await run_explain("pvc/default/nothing", "pv/x", "--kubeconfig", str(kubeconfig))
    assert run.code == 2
    assert run.stderr == (
        "kopf-csi explain: error: one object at a time: KIND/[NAMESPACE/]NAME, or KIND NAME"
        " (given: pvc/default/nothing pv/x)\n"
    )


async def test_a_missing_kubeconfig_is_one_clear_line(tmp_path: pathlib.Path) -> None:
    run = await run_explain("pvc/default/data", "--kubeconfig", str(tmp_path / "none"))
    assert run.code == 2
    assert run.stderr.splitlines() == [
        f"kopf-csi explain: error: the kubeconfig {tmp_path / 'none'} does not exist"
        " (or is not a file)"
    ]
    env = {"KUBECONFIG": "", "HOME": str(tmp_path), "KUBERNETES_SERVICE_HOST": ""}
    run = await run_explain("pvc/default/data", env=env)
    assert run.code == 2
    assert run.stderr.splitlines() == [
        "kopf-csi explain: error: no kubeconfig: give --kubeconfig, set KUBECONFIG or write"
        " ~/.kube/config"
    ]


async def test_an_unreachable_api_is_one_clear_line(tmp_path: pathlib.Path) -> None:
    async with EmulatedCluster() as cluster:
        kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")
        url = cluster.url
    run = await run_explain("pvc/default/data", "--kubeconfig", str(kubeconfig))  # it has gone
    assert run.code == 2
    (line,) = run.stderr.splitlines()
    assert line.startswith(f"kopf-csi explain: error: cannot reach the Kubernetes API at {url}")


async def test_kubectl_plugin_takes_kubectls_flags(
    cluster: EmulatedCluster, kubeconfig: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """`kubectl csi explain` runs the installed `kubectl-csi` with its arguments."""
    plugin = shutil.which("kubectl-csi") or str(pathlib.Path(sys.executable).parent / "kubectl-csi")
    cluster.create(
        "persistentvolumeclaims",
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
         "metadata": {"name": "data", "namespace": "team"},
         "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "none",
                  "resources": {"requests": {"storage": "1Mi"}}}},
    )  # fmt: skip
    context = "emulated"  # the emulated cluster's kubeconfig has this one context
    process = await asyncio.create_subprocess_exec(
        plugin, "explain", "pvc", "data", "-n", "team", "--kubeconfig", str(kubeconfig),
        "--context", context, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    stdout, stderr = await process.communicate()
    assert process.returncode == 1, stderr
    assert stdout.decode().splitlines()[0] == (
        'BLOCKED: persistentvolumeclaim/team/data: StorageClass "none" not found'
    )
    process = await asyncio.create_subprocess_exec(
        plugin, "explain", "pvc/team/data", "--kubeconfig", str(kubeconfig),
        "--context", "nosuch", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    stdout, stderr = await process.communicate()
    assert process.returncode == 2
    assert len(stderr.decode().splitlines()) == 1, stderr
