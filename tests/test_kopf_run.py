"""`kopf run` with our handler modules works as a user would run it against a cluster.

We test these aspects:
- the modules load under kopf's own CLI (no embedding), read their settings from the
  environment, log in with the kubeconfig, connect to the driver and provision a claim;
- SIGTERM stops it cleanly.
"""

from __future__ import annotations

import asyncio
import pathlib
import signal
import sys

from kopf_csi.driver import Driver
from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.kcm import ControllerManager

from .conftest import DRIVER_NAME, kopf_run_environment, seed_node, until

ROOT = pathlib.Path(__file__).resolve().parent.parent


async def test_kopf_run_provisions_a_claim(
    cluster: EmulatedCluster,
    kcm: ControllerManager,
    driver: Driver,
    kubeconfig: pathlib.Path,
    socket_path: pathlib.Path,
) -> None:
    seed_node(cluster)
    cluster.create(
        "storageclasses",
        {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "fast"},
         "provisioner": DRIVER_NAME, "volumeBindingMode": "Immediate", "reclaimPolicy": "Delete"},
    )  # fmt: skip
    env = kopf_run_environment(kubeconfig, socket_path)
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "kopf", "run", "--standalone", "--all-namespaces",
        "-m", "kopf_csi_handlers.lifecycle", "-m", "kopf_csi_handlers.caches",
        "-m", "kopf_csi_handlers.provisioner",
        env=env, cwd=ROOT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    try:
        cluster.create(
            "persistentvolumeclaims",
            {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
             "metadata": {"name": "data", "namespace": "default"},
             "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "fast",
                      "resources": {"requests": {"storage": "1Mi"}}}},
            namespace="default",
        )  # fmt: skip

        def bound() -> bool:
            assert process.returncode is None, "kopf run exited early"
            claim = cluster.get("persistentvolumeclaims", "default", "data") or {}
            return bool(claim.get("status", {}).get("phase") == "Bound")

        await until(bound, timeout=30)
        assert len(driver.state.volumes) == 1
    finally:
        process.send_signal(signal.SIGTERM)
        output, _ = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 0, output.decode()[-3000:]
