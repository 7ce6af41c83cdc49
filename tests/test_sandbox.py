"""The README's first command: the sandbox starts everything, checks it, and leaves nothing.

We test these aspects:
- `-m` runs the user's modules (a file, a dotted module from the current directory) beside the
  defaults; a module that is not there, or fails on import, is one line on stderr and a
  non-zero exit before anything starts;
- every component answers (API, driver, operator) and the sandbox says so;
- the example manifests are applied over HTTP, and the narration follows each claim through
  provisioning, binding, attachment, detachment, deletion and volume deletion;
- with `--serve`, the kubectl lines it prints work as printed (apply, then get with columns),
  and so does its explain line (the Pending claim, with the operator's view); then the rest of
  the examples (`apply -k`): the Pod is scheduled and its WaitForFirstConsumer claim bound, the
  snapshot is taken and the claim restored from it bound; `get events` has the real columns;
- it exits on its own with status 0 and removes the driver's socket (no process left behind);
- it stops, cleanly, once the process that started it has gone (nox ended by a SIGINT of its
  own): no orphan left serving.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

import pytest

from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.scheduling import Scheduler, pick_node

from .conftest import seed_node, until


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


SANDBOX = [sys.executable, "-m", "kopf_csi.sandbox"]
HOOK_MODULE = """
import pathlib
import shutil
import signal

import kopf
from kopf_csi.provisioning.hooks import create_volume_hooks


async def mark(claim, storage_class, request):
    pathlib.Path(f"{MARK}-{claim['metadata']['name']}").touch()


@kopf.on.startup()
async def register(memo, **_):
    create_volume_hooks(memo).append(mark)
"""


def _project(tmp_path: pathlib.Path) -> pathlib.Path:
    """A user's project: a handler file, and a package with a handler module, each a
    CreateVolume hook that leaves a file named after each claim it saw."""
    project = tmp_path / "project"
    (project / "mine").mkdir(parents=True)
    (project / "mine" / "__init__.py").write_text("")
    (project / "mine" / "hooks.py").write_text(HOOK_MODULE.replace("{MARK}", "dotted"))
    (project / "hook.py").write_text(HOOK_MODULE.replace("{MARK}", "file"))
    return project


def test_sandbox_runs_the_users_modules_beside_the_defaults(tmp_path: pathlib.Path) -> None:
    project = _project(tmp_path)
    args = ["--dir", str(tmp_path / "sandbox"), "--timeout", "5", "-m", "./hook.py"]
    result = subprocess.run(
        [*SANDBOX, *args, "-m", "mine.hooks"],
        capture_output=True, text=True, timeout=90, cwd=project,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert "kopf_csi_handlers.resizer, ./hook.py, mine.hooks; connected to" in result.stdout
    assert "pvc default/data-immediate  Bound" in result.stdout
    marks = sorted(path.name for path in project.iterdir() if "-data-" in path.name)
    assert marks == [
        "dotted-data-immediate", "dotted-data-wffc", "file-data-immediate", "file-data-wffc",
    ]  # fmt: skip


def test_a_bad_module_is_one_line_and_starts_nothing(tmp_path: pathlib.Path) -> None:
    project = _project(tmp_path)
    (project / "broken.py").write_text("import kopf\n\nvalue = undefined_name\n")
    (project / "unfinished.py").write_text("def handler(:\n")
    expected = {
        "missing": (2, "no module named 'missing'"),
        "./absent.py": (2, "no such handler file: 'absent.py'"),
        "./broken.py": (
            1,
            "a handler module failed to load (./broken.py): NameError: name 'undefined_name' "
            "is not defined (broken.py, line 3)",
        ),
        "unfinished": (1, "a handler module failed to load (unfinished): SyntaxError: "),
    }
    workdir = tmp_path / "sandbox"
    workdir.mkdir()
    (workdir / "kubeconfig").write_text("the last run's")
    for module, (code, text) in expected.items():
        result = subprocess.run(
            [*SANDBOX, "--dir", str(workdir), "-m", module],
            capture_output=True, text=True, timeout=60, cwd=project,
        )  # fmt: skip
        assert result.returncode == code, result.stderr
        lines = result.stderr.splitlines()
        assert len(lines) == 1, result.stderr
        assert lines[0].startswith(f"python -m kopf_csi.sandbox: error: {text}"), lines[0]
        assert result.stdout == ""  # nothing started, nothing narrated
        assert (workdir / "kubeconfig").read_text() == "the last run's"  # left as it was


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="needs kubectl (not on PATH)")
def test_the_kubectl_lines_it_prints_work(tmp_path: pathlib.Path) -> None:
    """`--serve`, then the two kubectl lines and the explain line it prints, as a user copies
    them."""
    workdir = tmp_path / "sandbox"
    process = subprocess.Popen(
        [*SANDBOX, "--serve", "--dir", str(workdir), "--timeout", "5"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        cwd=pathlib.Path(__file__).resolve().parent.parent,
    )  # fmt: skip
    assert process.stdout is not None
    try:
        lines = []
        while not lines or not lines[-1].startswith("serving until Ctrl-C"):
            line = process.stdout.readline()
            assert line, process.stderr.read() if process.stderr else ""
            lines.append(line)
        apply, get, explain = (process.stdout.readline().split() for _ in range(3))
        assert process.stdout.readline().startswith("then the rest")
        apply_all = process.stdout.readline().split()
        cache = ["--cache-dir", str(tmp_path / "kube-cache")]
        done = subprocess.run([*apply, *cache], capture_output=True, text=True, timeout=60)
        assert done.stdout.splitlines() == [
            "persistentvolumeclaim/data-immediate created",
            "persistentvolumeclaim/data-wffc created",
        ], done.stderr
        wait = [*get[:3], "wait", "--for=jsonpath={.status.phase}=Bound", "pvc/data-immediate"]
        subprocess.run([*wait, *cache], check=True, capture_output=True, timeout=60)
        done = subprocess.run([*get, *cache], capture_output=True, text=True, timeout=60)
        rows = [line.split() for line in done.stdout.splitlines() if line.strip()]
        explained = subprocess.run(explain, capture_output=True, text=True, timeout=60)
        # The rest of the examples: the Pod is scheduled (data-wffc gets its node and its
        # volume), the snapshot is taken and the claim restored from it is provisioned.
        done = subprocess.run([*apply_all, *cache], capture_output=True, text=True, timeout=60)
        applied = done.stdout.splitlines()
        kubectl = [*get[:3], *cache]
        for claim in ("data-wffc", "data-restored"):
            subprocess.run(
                [*kubectl, "wait", "--for=jsonpath={.status.phase}=Bound", f"pvc/{claim}",
                 "--timeout=60s"], check=True, capture_output=True, timeout=90,
            )  # fmt: skip
        ready = subprocess.run(
            [*kubectl, "get", "vs", "data-immediate-snapshot", "-o",
             "jsonpath={.status.readyToUse}"], capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        pod = subprocess.run(
            [*kubectl, "describe", "pod", "app"], capture_output=True, text=True, timeout=60
        )
        events = subprocess.run(
            [*kubectl, "get", "events"], capture_output=True, text=True, timeout=60
        )
    finally:
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err[-2000:]
    assert "stopped: nothing left running" in out
    assert rows[0][:6] == ["NAMESPACE", "NAME", "STATUS", "VOLUME", "CAPACITY", "ACCESS"]
    claims = {row[1]: row for row in rows if row[1].startswith("persistentvolumeclaim/")}
    immediate = claims["persistentvolumeclaim/data-immediate"]
    assert immediate[2] == "Bound"
    assert immediate[3].startswith("pvc-")
    assert immediate[4:7] == ["1Gi", "RWO", "kopf-csi-immediate"]
    assert claims["persistentvolumeclaim/data-wffc"][2] == "Pending"  # no Pod uses it
    volumes = [row[:5] for row in rows if row[0].startswith("persistentvolume/")]  # no namespace
    assert volumes == [[f"persistentvolume/{immediate[3]}", "1Gi", "RWO", "Delete", "Bound"]]
    assert explained.returncode == 1, explained.stderr  # explained as blocked
    first, *evidence = explained.stdout.splitlines()
    assert first == (
        "BLOCKED: persistentvolumeclaim/default/data-wffc: waiting for a first consumer: "
        "no pod uses this claim (the class binds WaitForFirstConsumer)"
    )
    assert "  operator: serves hostpath.csi.kopf.dev" in evidence  # from --operator
    assert "pod/app created" in applied, applied
    assert "volumesnapshot.snapshot.storage.k8s.io/data-immediate-snapshot created" in applied
    assert ready.stdout == "true", ready.stderr
    assert "Successfully assigned default/app to node-1" in pod.stdout, pod.stdout
    assert events.stdout.split("\n", 1)[0].split() == [
        "LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE",
    ]  # fmt: skip
    assert " persistentvolumeclaim/data-wffc " in events.stdout


def test_the_scheduler_stand_in_picks_a_node_that_takes_pods() -> None:
    a, b = {"metadata": {"name": "a"}}, {"metadata": {"name": "b"}}
    cordoned = {"metadata": {"name": "a"}, "spec": {"unschedulable": True}}
    going = {"metadata": {"name": "a", "deletionTimestamp": "2026-12-02T00:00:00Z"}}
    assert pick_node([b, a]) == "a"
    assert pick_node([cordoned, b]) == "b"
    assert pick_node([going]) is None
    assert pick_node([]) is None


async def test_the_scheduler_stand_in_binds_a_pod_as_kube_scheduler(
    cluster: EmulatedCluster,
) -> None:
    """The node, and the `Scheduled` event, written under the scheduler's field manager."""
    seed_node(cluster)
    pod = {"metadata": {"name": "app"}, "spec": {"containers": [{"name": "app"}]}}
    async with Scheduler(cluster):
        cluster.create("pods", pod, namespace="default")
        await until(lambda: (cluster.get("pods", "default", "app") or {}).get("spec", {}).get(
            "nodeName"))  # fmt: skip
        (event,) = await until(lambda: cluster.objects("events", namespace="default"))
    assert cluster.get("pods", "default", "app")["spec"]["nodeName"] == "node-1"
    assert (event["reason"], event["message"]) == (
        "Scheduled", "Successfully assigned default/app to node-1",
    )  # fmt: skip
    assert event["source"] == {"component": "default-scheduler"}
    assert event["involvedObject"]["kind"] == "Pod"
    assert {m["manager"] for m in event["metadata"]["managedFields"]} == {"kube-scheduler"}
    bound = cluster.get("pods", "default", "app")["metadata"]["managedFields"]
    assert "kube-scheduler" in {m["manager"] for m in bound}


PARENT = """
import pathlib, subprocess, sys, time
log = pathlib.Path(sys.argv[1])
with log.open("w") as out:
    child = subprocess.Popen(
        [sys.executable, "-m", "kopf_csi.sandbox", "--serve", "--dir", sys.argv[2]],
        stdout=out, stderr=subprocess.STDOUT,
    )
print(child.pid, flush=True)
while "serving until Ctrl-C" not in log.read_text():
    if child.poll() is not None:
        sys.exit(3)
    time.sleep(0.05)
# Gone without stopping its child, as nox is by a SIGINT of its own.
"""


def _running(pid: int) -> bool:
    """Whether the process runs (an unreaped zombie of a reparented child does not)."""
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


@pytest.mark.skipif(not pathlib.Path("/proc/self/stat").exists(), reason="needs Linux's /proc")
def test_the_sandbox_stops_when_its_parent_goes(tmp_path: pathlib.Path) -> None:
    workdir, log = tmp_path / "sandbox", tmp_path / "sandbox.log"
    parent = subprocess.run(
        [sys.executable, "-c", PARENT, str(log), str(workdir)],
        capture_output=True, text=True, timeout=90,
        cwd=pathlib.Path(__file__).resolve().parent.parent,
    )  # fmt: skip
    assert parent.returncode == 0, log.read_text()[-2000:]
    pid = int(parent.stdout)
    deadline = time.monotonic() + 60
    try:
        while _running(pid):
            assert time.monotonic() < deadline, f"the orphaned sandbox {pid} still runs"
            time.sleep(0.1)
    finally:
        if _running(pid):  # failed: leave no orphan behind either
            os.kill(pid, signal.SIGKILL)
    assert log.read_text().rstrip().endswith("stopped: nothing left running"), log.read_text()
    assert not (workdir / "csi.sock").exists()
