"""`kopf-csi run` as a user runs it: a process of its own against the cluster and the driver.

We test these aspects:
- flags and variables reach the handlers: the PV is named with `--volume-name-prefix`, and a
  user's module file (`-m path.py`) is loaded beside the defaults and sees `memo.settings`;
- SIGTERM stops it cleanly, with exit code 0;
- `--no-csi` with the hostdir example's file (`-m handlers/examples/hostdir_provisioner.py`):
  a claim is provisioned with no driver anywhere;
- a bad value, an unknown module, or modules without a login handler (`--no-default-modules`
  without `kopf_csi_handlers.lifecycle`): exit code 2, one line on stderr, no traceback;
- an operator that cannot start (no driver at the address; no way to log in): exit code 1,
  the reason logged once, in one line naming the socket (or the login) and the cause;
- SIGTERM stops an idle operator at once (not after kopf's 5 s for a "hung" task);
- `-m package.module` is found from the current directory, as `python -m` finds it.
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import sys
import textwrap
import time

import pytest

from kopf_csi.driver import Driver
from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.kcm import ControllerManager

from ..conftest import DRIVER_NAME, seed_node, stopped_cleanly, until
from .processes import finished

ROOT = pathlib.Path(__file__).resolve().parents[2]
USER_MODULE = textwrap.dedent(
    """
    import json
    import os
    import pathlib

    import kopf


    @kopf.on.startup(id="user.startup")
    async def remember(memo, **_):
        settings = memo.settings
        pathlib.Path(os.environ["USER_MODULE_MARK"]).write_text(json.dumps({
            "timeout": settings.csi.timeout,
            "attacher_timeout": settings.attacher.timeout,
            "workers": settings.workers.provisioner,
        }))
    """
)


def _environment(**extra: str) -> dict[str, str]:
    """The test's environment without any KOPF_CSI_ variable a developer may have set."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("KOPF_CSI_")}
    env.pop("KUBECONFIG", None)
    env.pop("CSI_ADDRESS", None)
    return {**env, **extra}


async def _kopf_csi(
    *args: str, env: dict[str, str], cwd: pathlib.Path
) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "kopf_csi", *args, env=env, cwd=cwd,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("loop_env", "event_loop"),
    [
        pytest.param({}, "uvloop", id="default-uvloop"),
        pytest.param({"KOPF_CSI_EVENT_LOOP": "asyncio"}, "asyncio", id="asyncio"),
    ],
)
async def test_run_provisions_a_claim_and_stops_on_sigterm(
    loop_env: dict[str, str],
    event_loop: str,
    cluster: EmulatedCluster,
    kcm: ControllerManager,
    driver: Driver,
    kubeconfig: pathlib.Path,
    socket_path: pathlib.Path,
    tmp_path: pathlib.Path,
) -> None:
    seed_node(cluster)
    cluster.create(
        "storageclasses",
        {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "fast"},
         "provisioner": DRIVER_NAME, "volumeBindingMode": "Immediate", "reclaimPolicy": "Delete"},
    )  # fmt: skip
    module = tmp_path / "user_handlers.py"
    module.write_text(USER_MODULE)
    mark = tmp_path / "mark.json"
    env = _environment(
        USER_MODULE_MARK=str(mark),
        KOPF_CSI_KUBECONFIG=str(kubeconfig),  # from the environment ...
        KOPF_CSI_WORKER_THREADS="7",
        KOPF_CSI_TIMEOUT="9s",  # ... and overridden by the flag below
        KOPF_CSI_LOG_FORMAT="json",
        **loop_env,
    )
    process = await _kopf_csi(
        "run", f"-csi-address=unix://{socket_path}", "--timeout", "1m30s",
        "--volume-name-prefix=vol", "-m", str(module), env=env, cwd=tmp_path,
    )  # fmt: skip
    try:
        volume = await _bound_claim(cluster, process, storage_class="fast")
        assert volume.startswith("vol-")
        assert len(driver.state.volumes) == 1
        assert mark.read_text() == '{"timeout": 90.0, "attacher_timeout": 90.0, "workers": 7}'
    finally:
        log = await stopped_cleanly(process)
    assert '"event":"operator_stopped"' in log
    starting = next(json.loads(line) for line in log.splitlines() if "operator_starting" in line)
    assert starting["event_loop"] == event_loop


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--timeout=soon"], "--timeout='soon' is not a duration", id="bad-duration"),
        pytest.param(["-m", "no_such_module"], "no module named 'no_such_module'",
                     id="unknown-module"),
        pytest.param(["-m", "missing/handlers.py"], "no such handler file: 'missing/handlers.py'",
                     id="unknown-file"),
        pytest.param(["--strict-topolgy"], "did you mean --strict-topology?", id="unknown-flag"),
        pytest.param(["--no-default-modules", "-m", "./no_login.py"],
                     "no handler module logs in to Kubernetes: add -m kopf_csi_handlers.lifecycle",
                     id="no-login"),  # kopf would fail later with a traceback of its own
        pytest.param(["--event-loop=libuv"], "argument --event-loop: invalid choice: 'libuv'",
                     id="unknown-event-loop"),
    ],
)  # fmt: skip
async def test_bad_input_exits_2_with_one_line(
    args: list[str], message: str, tmp_path: pathlib.Path
) -> None:
    (tmp_path / "no_login.py").write_text(NO_LOGIN_MODULE)
    process = await _kopf_csi("run", *args, env=_environment(), cwd=tmp_path)
    stdout, stderr = await finished(process, 30)
    assert process.returncode == 2
    assert stdout == b""
    lines = stderr.decode().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("kopf-csi run: error: ")
    assert message in lines[0]


async def test_a_bad_event_loop_variable_exits_2_with_one_line(tmp_path: pathlib.Path) -> None:
    env = _environment(KOPF_CSI_EVENT_LOOP="libuv")
    process = await _kopf_csi("run", env=env, cwd=tmp_path)
    stdout, stderr = await finished(process, 30)
    assert process.returncode == 2
    assert stdout == b""
    lines = stderr.decode().splitlines()
    assert lines == [
        "kopf-csi run: error: KOPF_CSI_EVENT_LOOP='libuv' is not one of auto, uvloop, asyncio"
    ]


async def test_an_operator_that_cannot_start_exits_1(
    cluster: EmulatedCluster, kubeconfig: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    # All the default modules: the controllers' start-ups give up at once, saying why. The
    # connect timeout is the default 30 s: a socket path that does not exist at all ends the
    # wait after a few seconds' grace (`csi.client.MISSING_SOCKET_GRACE`).
    env = _environment(KUBECONFIG=str(kubeconfig))
    started = time.monotonic()
    process = await _kopf_csi(
        "run", f"--csi-address={tmp_path / 'missing.sock'}", "--log-format=json",
        env=env, cwd=tmp_path,
    )  # fmt: skip
    _, stderr = await finished(process, 60)
    assert time.monotonic() - started < 25  # not the connect timeout, nor 10 s per controller
    log = stderr.decode()
    assert process.returncode == 1, log[-3000:]
    records = [json.loads(line) for line in log.splitlines()]
    # One line, the last, names the socket and the cause; the controllers that did not start
    # because of it (eight of them) and kopf's own report of it say nothing at error.
    errors = [record for record in records if record["level"] == "error"]
    assert errors == [records[-1]], log[-3000:]
    last = records[-1]
    assert (last["event"], last["handler"]) == ("operator_failed", "lifecycle.connect")
    assert "cannot start without the CSI driver" in last["error"]
    assert f"{tmp_path / 'missing.sock'}" in last["error"]
    assert "No such file or directory" in last["error"]


async def test_an_operator_that_cannot_log_in_exits_1(
    driver: Driver, socket_path: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """No service account, no kubeconfig given, none at ~/.kube/config: one line and exit 1,
    not a retry every minute with a traceback."""
    env = _environment(HOME=str(tmp_path))
    env.pop("KUBERNETES_SERVICE_HOST", None)
    process = await _kopf_csi(
        "run", f"--csi-address={socket_path}", "--log-format=json", env=env, cwd=tmp_path
    )
    _, stderr = await finished(process, 60)
    log = stderr.decode()
    assert process.returncode == 1, log[-3000:]
    records = [json.loads(line) for line in log.splitlines()]
    errors = [record for record in records if record["level"] == "error"]
    assert errors == [records[-1]], log[-3000:]
    assert (errors[0]["event"], errors[0]["handler"]) == ("operator_failed", "lifecycle.connect")
    assert "cannot log in to Kubernetes" in errors[0]["error"]
    assert "no kubeconfig at $KUBECONFIG or ~/.kube/config" in errors[0]["error"]
    assert "current-context" not in errors[0]["error"]  # the library's misleading words


STOPPING_MODULE = textwrap.dedent(
    """
    import kopf

    from kopf_csi import runtime


    @kopf.on.login(id="user.login")
    async def login(memo, **_):
        return await runtime.connection_info(runtime.settings_from_memo(memo))


    @kopf.on.startup(id="user.stop")
    async def stop(memo, **_):
        runtime.request_stop(memo, "told to stop")
    """
)


NO_LOGIN_MODULE = textwrap.dedent(
    """
    import kopf


    @kopf.on.startup(id="user.hello")
    async def hello(**_):
        pass
    """
)


async def test_an_operator_that_stops_itself_exits_1(
    cluster: EmulatedCluster, kubeconfig: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """`runtime.request_stop` (a lost Lease) ends the process with an error, as in Go."""
    module = tmp_path / "stopping.py"
    module.write_text(STOPPING_MODULE)
    process = await _kopf_csi(
        "run", "--no-default-modules", "-m", str(module), f"--kubeconfig={kubeconfig}",
        "--log-format=json", env=_environment(), cwd=tmp_path,
    )  # fmt: skip
    _, stderr = await finished(process, 60)
    log = stderr.decode()
    assert process.returncode == 1, log[-3000:]
    last = json.loads(log.splitlines()[-1])
    assert (last["event"], last["reason"]) == ("operator_stopped_itself", "told to stop")


async def test_run_without_a_csi_driver_serves_a_provisioner_module(
    cluster: EmulatedCluster,
    kcm: ControllerManager,
    kubeconfig: pathlib.Path,
    tmp_path: pathlib.Path,
) -> None:
    """`kopf-csi run --no-csi -m <file>`: no driver anywhere, the example provisions a claim."""
    base = tmp_path / "hostdir"
    seed_node(cluster)
    cluster.create(
        "storageclasses",
        {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "dirs"},
         "provisioner": "kopf-csi.kopf.dev/hostdir", "parameters": {"basePath": str(base)},
         "volumeBindingMode": "Immediate", "reclaimPolicy": "Delete"},
    )  # fmt: skip
    env = _environment(KOPF_CSI_KUBECONFIG=str(kubeconfig), KOPF_CSI_LOG_FORMAT="json")
    example = ROOT / "handlers" / "examples" / "hostdir_provisioner.py"
    process = await _kopf_csi(
        "run", "--no-csi", "--node-name=node-1", "-m", str(example), env=env, cwd=ROOT
    )
    try:
        volume = await _bound_claim(cluster, process, storage_class="dirs")
        assert [p.name for p in base.iterdir()] == [volume]
        # And back: the released PV is deleted through the provisioner, directory and all.
        cluster.delete("persistentvolumeclaims", "default", "data")
        await until(lambda: cluster.get("persistentvolumes", None, volume) is None, timeout=30)
        assert list(base.iterdir()) == []
    finally:
        log = await stopped_cleanly(process)
    assert '"event":"started_without_driver"' in log


async def _bound_claim(
    cluster: EmulatedCluster, process: asyncio.subprocess.Process, *, storage_class: str
) -> str:
    """Create the claim `default/data` and wait until it is Bound; its volume's name."""
    cluster.create(
        "persistentvolumeclaims",
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
         "metadata": {"name": "data", "namespace": "default"},
         "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": storage_class,
                  "resources": {"requests": {"storage": "1Mi"}}}},
        namespace="default",
    )  # fmt: skip

    def bound() -> str:
        assert process.returncode is None, "kopf-csi run exited early"
        claim = cluster.get("persistentvolumeclaims", "default", "data") or {}
        phase = claim.get("status", {}).get("phase")
        return str(claim["spec"].get("volumeName", "")) if phase == "Bound" else ""

    volume: str = await until(bound, timeout=30)
    return volume


async def test_sigterm_stops_the_operator_at_once(
    cluster: EmulatedCluster, driver: Driver, kubeconfig: pathlib.Path,
    socket_path: pathlib.Path, tmp_path: pathlib.Path,
) -> None:  # fmt: skip
    process = await _kopf_csi(
        "run", f"--csi-address=unix://{socket_path}", f"--kubeconfig={kubeconfig}",
        "--log-format=json", env=_environment(), cwd=tmp_path,
    )  # fmt: skip
    assert process.stderr is not None
    lines: list[str] = []
    while not any("Initial authentication has finished" in line for line in lines):
        line = await asyncio.wait_for(process.stderr.readline(), 30)
        assert line, "".join(lines)[-3000:]
        lines.append(line.decode())
    signalled = time.monotonic()
    log = await stopped_cleanly(process)
    took = time.monotonic() - signalled
    # kopf gave the task waiting for our stop flag 5 s as a "hung" task (5.5 s in all).
    assert took < 3.0, f"{took:.1f}s\n{log[-3000:]}"
    assert '"event":"operator_stopped"' in log


async def test_dotted_modules_are_found_from_the_current_directory(
    cluster: EmulatedCluster, kubeconfig: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """As a user runs it: the console script, from the project folder (not `python -m`, which
    puts the current directory on the path by itself)."""
    package = tmp_path / "mine"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "module.py").write_text(STOPPING_MODULE)
    process = await asyncio.create_subprocess_exec(
        pathlib.Path(sys.executable).parent / "kopf-csi", "run", "--no-default-modules",
        "-m", "mine.module", f"--kubeconfig={kubeconfig}", "--log-format=json",
        env=_environment(), cwd=tmp_path,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, stderr = await finished(process, 60)
    log = stderr.decode()
    assert "no module named" not in log, log
    last = json.loads(log.splitlines()[-1])
    assert (last["event"], last["reason"]) == ("operator_stopped_itself", "told to stop")
    assert process.returncode == 1
