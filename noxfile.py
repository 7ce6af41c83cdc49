"""Developer sessions: `nox -s tests|lint|typecheck|protos|sandbox|bench`.

Every session installs from `requirements/constraints.txt`, the exact versions CI ran with.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
from typing import Any

import nox

ROOT = pathlib.Path(__file__).parent
PYPROJECT = nox.project.load_toml(ROOT / "pyproject.toml")
CONSTRAINTS = ("-c", str(ROOT / "requirements" / "constraints.txt"))
GENERATED = ROOT / "src" / "kopf_csi" / "csi" / "_generated"
PROTOS = ROOT / "protos"

nox.options.sessions = ["lint", "typecheck", "tests"]
nox.options.reuse_existing_virtualenvs = True
# A session whose Python is missing fails, saying so, as on CI: by default nox would skip it and
# exit 0, and the README's commands would seem to work while doing nothing.
nox.options.error_on_missing_interpreters = True


def install(session: nox.Session, *groups: str, extras: str = "sandbox") -> None:
    session.install(*CONSTRAINTS, "-e", f".[{extras}]" if extras else ".")
    for group in groups:
        session.install(*CONSTRAINTS, *nox.project.dependency_groups(PYPROJECT, group))


@nox.session(python=None)  # the Python nox runs with (3.11+): the README's second command
def tests(session: nox.Session) -> None:
    """Run the test suite: unit, emulator and end-to-end (kind tests skip without Docker).

    tests/monitoring needs Prometheus' own `prometheus` and `promtool`: installed here from
    Debian's package when promtool is missing (as root, or with sudo), so that this one
    command is all a fresh machine and CI (`.ci/run`) need."""
    install(session, "test", "protos")
    if (problem := install_prometheus()) is not None:
        session.warn(f"{problem}: tests/monitoring will fail, saying what to install")
    session.run("pytest", *(session.posargs or ["-q"]))


def install_prometheus(which: Any = shutil.which, run: Any = subprocess.run) -> str | None:
    """Debian's `prometheus` package when `promtool` is missing; None when it is there (or is
    now), else why it could not be installed. The binaries only: its service is not started
    (no init system here), and --no-install-recommends leaves the node exporter out."""
    if which("promtool"):
        return None
    apt = which("apt-get")
    if apt is None:
        return "promtool is missing and there is no apt-get to install it"
    sudo = [] if os.geteuid() == 0 else ([which("sudo")] if which("sudo") else None)
    if sudo is None:
        return "promtool is missing, and installing it needs root or sudo"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    packages = ["install", "-y", "-qq", "--no-install-recommends", "prometheus"]
    for args in (["update", "-qq"], packages):
        done = run([*sudo, apt, *args], capture_output=True, text=True, env=env, check=False)
        if done.returncode != 0:
            return f"apt-get {args[0]} failed: {(done.stderr or done.stdout).strip()[-300:]}"
    return None if which("promtool") else "apt-get installed prometheus, but no promtool"


@nox.session(python="3.11")
def lint(session: nox.Session) -> None:
    """ruff check, ruff format --check, and the layer contracts (pyproject's importlinter)."""
    install(session, "lint", extras="")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("lint-imports", "--no-cache")


@nox.session(python="3.11")
def typecheck(session: nox.Session) -> None:
    """mypy --strict over src, handlers and devtools (pyproject's [tool.mypy])."""
    install(session, "typecheck")
    session.run("mypy")


@nox.session(python="3.11")
def protos(session: nox.Session) -> None:
    """Regenerate the betterproto2 stubs for grpclib from protos/ into kopf_csi.csi._generated."""
    install(session, "protos", extras="")
    session.run("python", "tools/protogen.py", str(PROTOS), str(GENERATED))


@nox.session(python=None)  # the Python nox runs with (3.11+): the README's first command
def sandbox(session: nox.Session) -> None:
    """Start the emulated cluster, the reference driver and the operator, and show them working."""
    install(session)
    session.run("python", "-m", "kopf_csi.sandbox", *session.posargs)


@nox.session(python="3.11")
def bench(session: nox.Session) -> None:
    """Benchmark: 200 claims at once (issue 13's burst, judged against the Go sidecars on a real
    server), 1,000 claims end to end, the RSS with 10,000 PVs, 1,000 attaches and detaches,
    and the steady churn of issue 34 (20 claims a second for 90 s, each deleted after 30 s).

    Arguments replace the default runs: `nox -s bench -- --claims 200 --class wffc`,
    `nox -s bench -- --churn 5 --lifetime 30 --duration 600`. The
    benchmark and the chaos suite live in `devtools/`, not installed: nox runs them from here.
    """
    install(session)
    if session.posargs:
        session.run("python", "-m", "devtools.bench", *session.posargs)
        return
    session.run("python", "-m", "devtools.bench", "--claims", "200")
    session.run("python", "-m", "devtools.bench", "--claims", "1000")
    session.run("python", "-m", "devtools.bench", "--scale", "10000")
    session.run("python", "-m", "devtools.bench", "--attach", "1000")
    session.run(
        "python", "-m", "devtools.bench", "--churn", "20", "--lifetime", "30", "--duration", "90"
    )


# --- kind: the manifests on a real (local) cluster ----------------------------------------------

KIND_CLUSTER = "kopf-csi"
KIND_IMAGE = "kopf-csi:dev"  # what manifests/kind deploys
KIND_NODE = f"{KIND_CLUSTER}-control-plane"  # kind's name for the single node
KIND_STATE = ROOT / ".kind"  # the cluster's kubeconfig, the dev session's socket and data
# The cluster's snapshot-controller (one per cluster, not ours): upstream's, at the release whose
# csi-snapshotter the reference deployment pins (sidecars.md §3).
SNAPSHOT_CONTROLLER = (
    "https://github.com/kubernetes-csi/external-snapshotter/"
    "deploy/kubernetes/snapshot-controller?ref=v8.6.0"
)
SNAPSHOT_CRDS = ("volumesnapshotclasses", "volumesnapshotcontents", "volumesnapshots")


def kind_unavailable(which: Any = shutil.which) -> str | None:
    """Why the kind sessions cannot run here (None: they can): tools missing, no Docker daemon."""
    missing = [tool for tool in ("docker", "kind", "kubectl") if which(tool) is None]
    if missing:
        return f"{', '.join(missing)} not installed (needed: Docker with a daemon, kind, kubectl)"
    try:
        info = subprocess.run(
            [which("docker"), "info", "--format", "{{.ServerVersion}}"],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"docker does not answer: {exc}"
    if info.returncode != 0 or not info.stdout.strip():
        return f"the Docker daemon is not reachable: {(info.stderr or info.stdout).strip()}"
    return None


def _kind_cluster(session: nox.Session) -> pathlib.Path:
    """The kind cluster (created unless it exists), with the snapshot CRDs and controller."""
    kubeconfig = KIND_STATE / "kubeconfig"
    KIND_STATE.mkdir(exist_ok=True)
    clusters = session.run("kind", "get", "clusters", silent=True, external=True) or ""
    if KIND_CLUSTER not in str(clusters).split():
        session.run("kind", "create", "cluster", "--name", KIND_CLUSTER, "--wait", "180s",
                    "--kubeconfig", str(kubeconfig), external=True)  # fmt: skip
    else:
        session.run("kind", "export", "kubeconfig", "--name", KIND_CLUSTER,
                    "--kubeconfig", str(kubeconfig), external=True)  # fmt: skip
    kubectl = ("kubectl", "--kubeconfig", str(kubeconfig))
    session.run(*kubectl, "apply", "-k", str(ROOT / "manifests" / "crds"), external=True)
    session.run(*kubectl, "wait", "--for=condition=Established", "--timeout=60s",
                *(f"crd/{name}.snapshot.storage.k8s.io" for name in SNAPSHOT_CRDS),
                external=True)  # fmt: skip
    session.run(*kubectl, "apply", "-k", SNAPSHOT_CONTROLLER, external=True)
    return kubeconfig


@nox.session(python="3.11")
def kind(session: nox.Session) -> None:
    """Deploy to a kind cluster (image built and loaded) and run tests/kind against it.

    The cluster stays up for `nox -s dev` and reruns; `kind delete cluster --name kopf-csi`
    removes it. Arguments go to pytest: `nox -s kind -- -k snapshot`.
    """
    if reason := kind_unavailable():
        session.skip(reason)
    install(session, "test")
    kubeconfig = _kind_cluster(session)
    kubectl = ("kubectl", "--kubeconfig", str(kubeconfig))
    session.run("docker", "build", "--tag", KIND_IMAGE, str(ROOT), external=True)
    session.run("kind", "load", "docker-image", KIND_IMAGE, "--name", KIND_CLUSTER, external=True)
    session.run(*kubectl, "apply", "-k", str(ROOT / "manifests" / "kind"), external=True)
    # A rebuilt image under the same tag: restart, so the pod runs the new one.
    session.run(*kubectl, "-n", "kopf-csi", "rollout", "restart", "deployment/kopf-csi",
                external=True)  # fmt: skip
    session.run(*kubectl, "-n", "kopf-csi", "rollout", "status", "deployment/kopf-csi",
                "--timeout=300s", external=True)  # fmt: skip
    session.run(
        "pytest", "tests/kind", "-m", "kind", "-p", "no:randomly", *(session.posargs or ["-v"]),
        env={"KOPF_CSI_KIND_KUBECONFIG": str(kubeconfig)},
    )  # fmt: skip


@nox.session(python="3.11")
def dev(session: nox.Session) -> None:
    """Run the operator locally (`kopf-csi run`) against the kind cluster, with the reference
    driver on a local socket; Ctrl+C stops both.

    The in-cluster Deployment (if `nox -s kind` made one) is scaled to 0 for the time being;
    the cluster-wide objects (RBAC, CSIDriver, StorageClasses) are applied from manifests/.
    Volumes are provisioned, attached, snapshotted and deleted; Pods cannot mount them (the
    kubelet has no node plugin to call). Arguments go to `kopf-csi run`: `-- --v=5`.
    """
    if reason := kind_unavailable():
        session.skip(reason)
    install(session)
    kubeconfig = _kind_cluster(session)
    kubectl = ("kubectl", "--kubeconfig", str(kubeconfig))
    session.run(*kubectl, "apply", "-k", str(ROOT / "manifests"), external=True)
    session.run(*kubectl, "-n", "kopf-csi", "scale", "deployment/kopf-csi", "--replicas=0",
                external=True)  # fmt: skip
    socket = KIND_STATE / "csi.sock"
    bin_dir = pathlib.Path(session.bin)
    driver = subprocess.Popen(
        [str(bin_dir / "python"), "-m", "kopf_csi.driver", f"--endpoint=unix://{socket}",
         f"--node-id={KIND_NODE}", f"--data-dir={KIND_STATE / 'driver'}", "--attach",
         "--known-nodes=*", "--log-format=console"],
    )  # fmt: skip
    try:
        session.run(
            "kopf-csi", "run", f"--csi-address={socket}", f"--kubeconfig={kubeconfig}",
            "--enable-capacity", "--http-endpoint=127.0.0.1:8080", "--log-format=console",
            *session.posargs,
            env={"POD_NAMESPACE": "kopf-csi", "NODE_NAME": KIND_NODE},
        )  # fmt: skip
    finally:
        driver.terminate()
        driver.wait(timeout=30)


@nox.session(python="3.11")
def chaos(session: nox.Session) -> None:
    """Chaos: 500 claims, 500 attached, operator SIGKILLs, driver restarts and faults, API faults.

    Every count (claims without a PV, leaks, stuck attachments, ...) must be 0; see
    docs/reliability.md. Arguments replace the default run: `nox -s chaos -- --claims 50`.
    """
    install(session)
    args = session.posargs or ["--claims", "500", "--attach", "500", "--seed", "1"]
    session.run("python", "-m", "devtools.chaos", *args)


@nox.session(python="3.11")
def soak(session: nox.Session) -> None:
    """Soak: create and delete 10,000 claims in waves of 500; CPU per claim and RSS stay flat.

    Writes the curve to docs/soak.svg. Arguments replace the default run.
    """
    install(session)
    args = session.posargs or ["--soak", "10000", "--wave", "500", "--svg", "docs/soak.svg"]
    session.run("python", "-m", "devtools.chaos", *args)
