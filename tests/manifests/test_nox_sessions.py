"""The kind and dev nox sessions' guard: where they cannot run, they say why and skip. And the
README's commands on a machine without the session's Python: the sandbox runs on the Python nox
runs with; a session whose Python is missing fails, saying so.

Not marked `kind`, and not under tests/kind (tests/conftest.py skips whatever has "kind" among
its keywords, which includes the directory name): this runs everywhere.
`kind_unavailable` is what both sessions call first.
"""

from __future__ import annotations

import importlib.util
import json
import pathlib
import stat
import subprocess
import sys
from types import ModuleType

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def noxfile() -> ModuleType:
    pytest.importorskip("nox")
    spec = importlib.util.spec_from_file_location("kopf_csi_noxfile", ROOT / "noxfile.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _tools(tmp_path: pathlib.Path, scripts: dict[str, str]) -> pathlib.Path:
    for name, body in scripts.items():
        path = tmp_path / name
        path.write_text(f"#!{sys.executable}\n{body}\n")
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return tmp_path


def _which(directory: pathlib.Path):  # type: ignore[no-untyped-def]
    def which(name: str) -> str | None:
        path = directory / name
        return str(path) if path.exists() else None

    return which


def test_missing_tools_are_named(noxfile: ModuleType, tmp_path: pathlib.Path) -> None:
    tools = _tools(tmp_path, {"kubectl": "pass"})
    reason = noxfile.kind_unavailable(_which(tools))
    assert reason.startswith("docker, kind not installed")


def test_docker_without_a_daemon(noxfile: ModuleType, tmp_path: pathlib.Path) -> None:
    failing = "import sys; print('Cannot connect to the Docker daemon', file=sys.stderr); exit(1)"
    tools = _tools(tmp_path, {"docker": failing, "kind": "pass", "kubectl": "pass"})
    reason = noxfile.kind_unavailable(_which(tools))
    assert reason == "the Docker daemon is not reachable: Cannot connect to the Docker daemon"


def test_everything_there(noxfile: ModuleType, tmp_path: pathlib.Path) -> None:
    tools = _tools(tmp_path, {"docker": "print('28.2.2')", "kind": "pass", "kubectl": "pass"})
    assert noxfile.kind_unavailable(_which(tools)) is None


def test_this_machine(noxfile: ModuleType) -> None:
    """Whatever this machine has, the answer is a reason or None, never an exception."""
    reason = noxfile.kind_unavailable()
    assert reason is None or "not" in reason


def _nox(*args: str, tmp_path: pathlib.Path) -> subprocess.CompletedProcess[str]:
    pytest.importorskip("nox")
    return subprocess.run(
        [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "--envdir",
         str(tmp_path / "nox"), *args],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_a_missing_python_fails_the_session(tmp_path: pathlib.Path) -> None:
    """Not skipped with exit code 0, as nox does by default off CI: the README's commands would
    seem to work on a machine without that Python while running nothing."""
    done = _nox("-s", "lint", "--force-python", "3.99", tmp_path=tmp_path)
    assert done.returncode != 0, done.stderr
    assert "Python interpreter 3.99 not found" in done.stderr


@pytest.mark.parametrize("name", ["sandbox", "tests"])
def test_the_quickstart_runs_on_the_python_nox_runs_with(name: str, tmp_path: pathlib.Path) -> None:
    """The README's two commands on any Python 3.11+, not only on a machine with 3.11."""
    done = _nox("--list", "--json", "-s", name, tmp_path=tmp_path)
    (session,) = json.loads(done.stdout)
    assert session["python"] is None


def _quickstart_commands() -> dict[str, str]:
    """The README quickstart's command lines, by the nox session each runs."""
    readme = (ROOT / "README.md").read_text()
    block = readme.split("## Quickstart", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    lines = [line for line in block.splitlines() if line and not line.startswith("#")]
    return {line.rsplit(" -s ", 1)[1]: line for line in lines}


def test_ci_runs_the_readmes_test_command_and_only_that() -> None:
    """`.ci/run` is the README's second command from a clean clone: nothing installed beside
    it, so that what CI needs a fresh machine's user needs too (the session installs it)."""
    commands = _quickstart_commands()
    assert set(commands) == {"sandbox", "tests"}
    script = (ROOT / ".ci" / "run").read_text()
    steps = [
        line for line in script.splitlines()
        if line.strip() and not line.startswith("#") and not line.startswith("set ")
        and not line.startswith("cd ")
    ]  # fmt: skip
    assert steps == [commands["tests"]]


def test_prometheus_there_installs_nothing(noxfile: ModuleType, tmp_path: pathlib.Path) -> None:
    tools = _tools(tmp_path, {"promtool": "", "apt-get": "raise SystemExit(1)"})
    assert noxfile.install_prometheus(which=_which(tools)) is None


def test_prometheus_missing_is_installed_with_apt(
    noxfile: ModuleType, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """apt-get update, then the package without recommends; promtool is there after it."""
    monkeypatch.setattr(noxfile.os, "geteuid", lambda: 0)
    tools = _tools(tmp_path, {"apt-get": ""})
    calls: list[list[str]] = []

    def run(args: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        calls.append(args[1:])
        if "install" in args:
            _tools(tmp_path, {"promtool": ""})
        return subprocess.CompletedProcess(args, 0, "", "")

    assert noxfile.install_prometheus(which=_which(tools), run=run) is None
    assert calls == [
        ["update", "-qq"],
        ["install", "-y", "-qq", "--no-install-recommends", "prometheus"],
    ]


def test_prometheus_that_cannot_be_installed_says_why(
    noxfile: ModuleType, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(noxfile.os, "geteuid", lambda: 1000)
    assert "no apt-get" in noxfile.install_prometheus(which=_which(tmp_path))
    tools = _tools(tmp_path, {"apt-get": ""})
    assert "root or sudo" in noxfile.install_prometheus(which=_which(tools))
    monkeypatch.setattr(noxfile.os, "geteuid", lambda: 0)

    def failing(args: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(args, 100, "", "E: Unable to locate package")

    problem = noxfile.install_prometheus(which=_which(tools), run=failing)
    assert problem == "apt-get update failed: E: Unable to locate package"
