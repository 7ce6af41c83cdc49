"""The kind and dev nox sessions' guard: where they cannot run, they say why and skip.

Not marked `kind`, and not under tests/kind (tests/conftest.py skips whatever has "kind" among
its keywords, which includes the directory name): this runs everywhere.
`kind_unavailable` is what both sessions call first.
"""

from __future__ import annotations

import importlib.util
import pathlib
import stat
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
