"""Run the sandbox: the emulated cluster, the reference driver and the operator, together.

Everything runs in this one process (the operator in a thread of its own, as kopf needs) and
stops on exit, leaving nothing behind but the working directory it was given.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import pathlib
import shutil
import signal
import sys
import threading
import time
import traceback
from collections.abc import Sequence
from typing import Any

import yaml

from kopf_csi import kube, logs
from kopf_csi.csi import CSIClient, CSIError
from kopf_csi.driver import DriverConfig, Features, running_driver
from kopf_csi.modules import ModuleLoadError
from kopf_csi.sandbox.progress import Check, Tracker, format_checks
from kopf_csi.settings import CSISettings, HTTPSettings, KubeSettings, Settings
from kopf_csi.testing.emulator import EmulatedCluster, Subscription
from kopf_csi.testing.groupsnapshots import GroupSnapshotController
from kopf_csi.testing.kcm import ControllerManager
from kopf_csi.testing.operator import DEFAULT_MODULES, OperatorThread
from kopf_csi.testing.scheduling import Scheduler

__all__ = ["main", "run"]

NODE = "node-1"
DRIVER = "hostpath.csi.kopf.dev"
TOPOLOGY_KEY = "topology.hostpath.csi.kopf.dev/node"
EXAMPLES = (
    "csidriver.yaml", "storageclasses.yaml", "volumesnapshotclass.yaml", "claims.yaml", "pod.yaml",
)  # fmt: skip
RESOURCES = {
    "StorageClass": kube.STORAGE_CLASSES,
    "CSIDriver": kube.CSIDRIVERS,
    "VolumeSnapshotClass": kube.SNAPSHOT_CLASSES,
    "PersistentVolumeClaim": kube.CLAIMS,
    "Pod": kube.Resource("", "v1", "pods", namespaced=True),
}


def _examples_dir() -> pathlib.Path:
    """The example manifests: the package's own copy when installed from a clone (setup.py
    ships manifests/examples as its data), else the repository's (an editable install)."""
    installed = pathlib.Path(__file__).resolve().parent / "examples"
    for candidate in (
        installed,
        *(base / "manifests" / "examples" for base in (pathlib.Path.cwd(), *installed.parents)),
    ):
        if (candidate / EXAMPLES[0]).is_file():
            return candidate
    raise SystemExit(
        "manifests/examples not found: install kopf-csi from a clone (pip install /path/to/clone)"
        " or run the sandbox from the repository"
    )


def _node_objects() -> list[tuple[kube.Resource, dict[str, Any]]]:
    """What kubelet and node-driver-registrar would have registered for one node."""
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": NODE, "labels": {"kubernetes.io/hostname": NODE, TOPOLOGY_KEY: NODE}},
    }
    csinode = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSINode",
        "metadata": {"name": NODE},
        "spec": {"drivers": [{"name": DRIVER, "nodeID": NODE, "topologyKeys": [TOPOLOGY_KEY]}]},
    }
    return [(kube.NODES, node), (kube.CSINODES, csinode)]


async def _checks(
    api: kube.KubeClient, csi: CSIClient, operator: OperatorThread, cluster: EmulatedCluster
) -> list[Check]:
    checks = []
    try:
        version = await api.version()
        nodes = await api.list(kube.NODES)
        detail = f"{cluster.url} (version {version.get('gitVersion')}, {len(nodes)} node)"
        checks.append(Check("Kubernetes API (emulated)", True, detail))
    except kube.KubeError as exc:
        checks.append(Check("Kubernetes API (emulated)", False, str(exc)))
    try:
        probe = await csi.probe()
        info = await csi.driver_info()
        caps = ", ".join(sorted(info.controller_capabilities))
        ready = probe.ready is None or probe.ready
        checks.append(
            Check("CSI driver", ready, f"{info.name} {info.vendor_version} at {csi.path}")
        )
        checks.append(Check("  controller capabilities", True, caps))
    except CSIError as exc:
        checks.append(Check("CSI driver", False, str(exc)))
    driver = getattr(operator.memo, "driver", None)
    detail = (
        f"kopf, modules {', '.join(operator.modules)}; connected to {driver.name}"
        if operator.alive and driver is not None
        else f"not running: {operator.error!r}"
    )
    checks.append(Check("operator", operator.alive and driver is not None, detail))
    return checks


async def _apply(api: kube.KubeClient, examples: pathlib.Path, names: Sequence[str]) -> int:
    count = 0
    for name in names:
        for doc in yaml.safe_load_all((examples / name).read_text()):
            if doc:  # the Pod is given its node by the scheduler's stand-in
                await api.create(RESOURCES[doc["kind"]], doc)
                count += 1
    return count


FOLLOWED = ("persistentvolumeclaims", "persistentvolumes", "volumeattachments")


async def _follow(feed: Subscription, tracker: Tracker, *, until: Any, timeout: float) -> bool:
    """Print changes until `until()` is true (True) or the timeout passes (False)."""
    deadline = time.monotonic() + timeout
    done = until()
    while not done:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        with contextlib.suppress(TimeoutError):
            _show(tracker, await asyncio.wait_for(feed.batch(), remaining))
        done = until()
    while feed.pending:  # what happened along with the last change
        _show(tracker, await feed.batch())
    return True


def _show(tracker: Tracker, changes: Sequence[Any]) -> None:
    for change in changes:
        for line in tracker.lines(change.type, change.kind.plural, change.object):
            print(line, flush=True)


def _fresh(workdir: pathlib.Path) -> None:
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)


def _modules(extra: Sequence[str] | None) -> tuple[str, ...]:
    """The defaults, then the user's (``-m``, as ``kopf-csi run -m``), each once."""
    return (*DEFAULT_MODULES, *dict.fromkeys(m for m in extra or () if m not in DEFAULT_MODULES))


def _load(operator: OperatorThread) -> tuple[int, str] | None:
    """Load the handler modules before anything starts: None, or an exit code and one line
    (2 for a module that is not there, 1 for one that fails on import, as `kopf-csi run`)."""
    try:
        operator.load()
    except ModuleLoadError as exc:
        return 2, str(exc)
    except Exception as exc:  # the user's module failed on import: its own bug, said in a line
        where = traceback.extract_tb(exc.__traceback__)[-1]
        place = f" ({pathlib.Path(where.filename).name}, line {where.lineno})"
        if isinstance(exc, SyntaxError):
            place = ""  # its text names the file and the line already
        names = ", ".join(m for m in operator.modules if m not in DEFAULT_MODULES)
        return 1, f"a handler module failed to load ({names}): {type(exc).__name__}: {exc}{place}"
    return None


async def run(args: argparse.Namespace) -> int:
    workdir = pathlib.Path(args.dir)  # absolute: main() resolved it
    socket_path = workdir / "csi.sock"
    examples = _examples_dir()
    kubeconfig = workdir / "kubeconfig"
    settings = Settings(
        csi=CSISettings(address=str(socket_path)),
        kube=KubeSettings(kubeconfig=kubeconfig),
        http=HTTPSettings(endpoint="127.0.0.1:0"),  # metrics, health and explain's --operator
    )
    operator = OperatorThread(settings=settings, modules=_modules(args.modules))
    failed = _load(operator)
    if failed is not None:
        print(f"python -m kopf_csi.sandbox: error: {failed[1]}", file=sys.stderr, flush=True)
        return failed[0]
    _fresh(workdir)  # only now: a bad module leaves the last run's directory as it was
    config = DriverConfig(
        node_id=NODE,
        data_dir=workdir / "driver",
        features=Features(attach=True),
        known_nodes=None,
    )
    async with (
        EmulatedCluster(port=args.port) as cluster,
        ControllerManager(cluster),
        Scheduler(cluster),  # the pods that kubectl creates get the node
        GroupSnapshotController(cluster),  # the snapshot-controller, for snapshot.yaml
        running_driver(config, socket_path=socket_path, grace=1.0),
    ):
        cluster.write_kubeconfig(kubeconfig)
        for resource, body in _node_objects():
            cluster.create(resource.plural, body)
        await operator.start()
        try:
            async with (
                await kube.KubeClient.connect(kubeconfig) as api,
                CSIClient(str(socket_path), timeout=5) as csi,
            ):
                checks = await _checks(api, csi, operator, cluster)
                print("kopf-csi sandbox\n" + format_checks(checks), flush=True)
                if not all(check.ok for check in checks):
                    return 1
                if not await _demo(cluster, api, examples, timeout=args.timeout):
                    return 1
                if args.serve:
                    print(_hints(kubeconfig, examples, operator), flush=True)
                    await _wait_for_interrupt()
        finally:
            await operator.stop()
    print("\nstopped: nothing left running", flush=True)
    return 0


def _hints(kubeconfig: pathlib.Path, examples: pathlib.Path, operator: OperatorThread) -> str:
    """What to try while the sandbox serves: plain kubectl, and explain with the operator's view."""
    kubectl = f"kubectl --kubeconfig {kubeconfig}"
    script = pathlib.Path(sys.executable).parent / "kopf-csi"  # this venv's, on PATH or not
    explain = str(script) if script.exists() else f"{sys.executable} -m kopf_csi"
    return (
        f"\nserving until Ctrl-C. Try:\n  {kubectl} apply -f {examples / 'claims.yaml'}\n"
        f"  {kubectl} get pvc,pv,volumeattachments -A\n"
        f"  {explain} explain pvc/default/data-wffc --kubeconfig {kubeconfig} "
        f"--operator {operator.memo.http_server.url}\n"
        f"then the rest (a Pod for data-wffc, a snapshot and a claim restored from it):\n"
        f"  {kubectl} apply -k {examples}"
    )


async def _demo(
    cluster: EmulatedCluster, api: kube.KubeClient, examples: pathlib.Path, *, timeout: float
) -> bool:
    """Apply the examples and narrate what happens to each claim, volume and attachment."""
    tracker = Tracker()
    with cluster.subscribe(*FOLLOWED) as feed:
        print(f"\napplying {', '.join(EXAMPLES)} from {examples}:", flush=True)
        await _apply(api, examples, EXAMPLES)
        bound = await _follow(feed, tracker, until=_all_claims(cluster, _is_bound), timeout=timeout)
        if not bound:
            print(f"\nclaims still not Bound after {timeout:g}s", flush=True)
            return False
        attached = await _follow(
            feed, tracker, until=lambda: _all_attached(cluster), timeout=timeout
        )
        if not attached:
            print(f"\nvolumes still not attached after {timeout:g}s", flush=True)
            return False
        print("\ndeleting the pod and the claims:", flush=True)
        await api.delete(RESOURCES["Pod"], "app", "default")
        for claim in cluster.objects("persistentvolumeclaims"):
            await api.delete(kube.CLAIMS, claim["metadata"]["name"], "default")
        gone = await _follow(
            feed, tracker, until=lambda: not cluster.objects("persistentvolumes"), timeout=timeout
        )
        if not gone:
            print(f"\nvolumes still not deleted after {timeout:g}s", flush=True)
            return False
    return True


def _all_attached(cluster: EmulatedCluster) -> bool:
    attachments = cluster.objects("volumeattachments")
    return bool(attachments) and all(a.get("status", {}).get("attached") for a in attachments)


def _is_bound(claim: dict[str, Any]) -> bool:
    return bool(claim.get("status", {}).get("phase") == "Bound")


def _all_claims(cluster: EmulatedCluster, predicate: Any) -> Any:
    def check() -> bool:
        claims = cluster.objects("persistentvolumeclaims")
        return bool(claims) and all(predicate(c) for c in claims)

    return check


async def _wait_for_interrupt() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()


PARENT_POLL = 0.5
"""Seconds between two looks at whether the sandbox's parent is still there."""


def exit_with_parent(*, interval: float = PARENT_POLL) -> threading.Thread:
    """SIGTERM to this process once the process that started it has gone.

    `nox -s sandbox` starts the sandbox as its child; a SIGINT to nox alone (not to the
    terminal's whole process group) ends nox and left the sandbox serving, orphaned, on its
    port. The parent's pid is polled from a daemon thread (portable, and no `prctl`): a new one
    means this process was handed to another (init, a subreaper). SIGTERM then stops a
    `--serve` sandbox as Ctrl-C does, and ends one still in its demo at once.
    """
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(interval)
        os.kill(os.getpid(), signal.SIGTERM)

    thread = threading.Thread(target=watch, name="sandbox-parent", daemon=True)
    thread.start()
    return thread


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m kopf_csi.sandbox", description=__doc__)
    parser.add_argument("--dir", default=".sandbox", help="working directory (recreated)")
    parser.add_argument("--port", type=int, default=0, help="API port (default: any free one)")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds to wait per step")
    parser.add_argument("--serve", action="store_true", help="keep serving until Ctrl-C")
    parser.add_argument("--log-level", default="WARNING", help="log level (default WARNING)")
    parser.add_argument(
        "-m",
        "--module",
        dest="modules",
        action="append",
        metavar="MODULE",
        help="a handler module to run beside the defaults, as `kopf-csi run -m`: a dotted name "
        "(importable from the current directory) or a .py file; repeat for more",
    )
    args = parser.parse_args(argv)
    args.dir = str(pathlib.Path(args.dir).resolve())
    logs.configure(level=args.log_level, json=False)
    exit_with_parent()
    sys.exit(asyncio.run(run(args)))
