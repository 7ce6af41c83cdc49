"""The README's first command: the sandbox starts everything, checks it, and leaves nothing.

We test these aspects:
- every component answers (API, driver, operator) and the sandbox says so;
- the example manifests are applied over HTTP, and the narration follows each claim through
  provisioning, binding, attachment, detachment, deletion and volume deletion;
- it exits on its own with status 0 and removes the driver's socket (no process left behind).
"""

from __future__ import annotations

import pathlib
import subprocess
import sys


def test_sandbox_runs_and_exits_cleanly(tmp_path: pathlib.Path) -> None:
    workdir = tmp_path / "sandbox"
    result = subprocess.run(
        [sys.executable, "-m", "kopf_csi.sandbox", "--dir", str(workdir), "--timeout", "2"],
        capture_output=True,
        text=True,
        timeout=90,
        cwd=pathlib.Path(__file__).resolve().parent.parent,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout
    assert "Kubernetes API (emulated)  ok" in out
    assert "CSI driver                 ok      hostpath.csi.kopf.dev" in out
    assert "operator                   ok" in out
    assert "pvc default/data-immediate  created" in out
    assert "pvc default/data-wffc  created" in out
    assert "waiting for provisioner hostpath.csi.kopf.dev" in out
    assert "pvc default/data-immediate  Bound" in out
    assert "pvc default/data-wffc  node selected: node-1" in out
    assert "pvc default/data-wffc  Bound" in out
    assert out.count("  attached") == 2
    assert out.count("  Released") == 2
    assert out.count("pv pvc-") >= 8  # two volumes: created, Bound, Released, deleted
    assert "still not" not in out
    assert "stopped: nothing left running" in out
    assert (workdir / "kubeconfig").exists()
    assert not (workdir / "csi.sock").exists()
