"""What the wheel holds: the operator and what users run it with, not our development tools.

We test these aspects:
- the wheel that `pip wheel .` builds holds no module of the benchmark or the chaos suite (they
  live in the repository's `devtools/`, run from a checkout), and no `devtools` package;
- it still holds what users import or run: the testing kit with its pytest plugin (declared as
  a pytest11 entry point), its TLS files and the shipped RBAC, the sandbox with its example
  manifests, the reference driver.
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys
import zipfile

import pytest

from kopf_csi.sandbox.running import EXAMPLES

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    """`pip wheel . --no-deps` with the venv's setuptools (no network: no build isolation), in a
    clean copy of the sources with `devtools/` beside them: a checkout's stale build/ directory
    would otherwise add whatever an earlier build put there."""
    source, directory = tmp_path_factory.mktemp("source"), tmp_path_factory.mktemp("wheel")
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for name in ("src", "handlers", "devtools", "manifests"):
        shutil.copytree(ROOT / name, source / name, ignore=ignore)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "--wheel-dir", str(directory), str(source)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    (path,) = directory.glob("kopf_csi-*.whl")
    return zipfile.ZipFile(path)


def _modules(wheel: zipfile.ZipFile) -> set[str]:
    """Every module's dotted name in the wheel."""
    return {
        name.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
        for name in wheel.namelist()
        if name.endswith(".py")
    }


def test_no_benchmark_or_chaos_module(wheel: zipfile.ZipFile) -> None:
    modules = _modules(wheel)
    assert "kopf_csi.cli" in modules  # the listing is the package's
    development = {
        module for module in modules if {"bench", "chaos", "devtools"} & set(module.split("."))
    }
    assert development == set()


def test_the_testing_kit_the_sandbox_and_the_driver_stay(wheel: zipfile.ZipFile) -> None:
    modules = _modules(wheel)
    for module in (
        "kopf_csi.testing",
        "kopf_csi.testing.emulator",
        "kopf_csi.testing.kcm",
        "kopf_csi.testing.operator",
        "kopf_csi.testing.pytest_plugin",
        "kopf_csi.sandbox",
        "kopf_csi.sandbox.__main__",
        "kopf_csi.driver",
        "kopf_csi.driver.__main__",
    ):
        assert module in modules, module
    names = set(wheel.namelist())
    assert any(name.startswith("kopf_csi/testing/tls/") for name in names)
    # The sandbox's example manifests, the links to the base's files made real files.
    for example in EXAMPLES:
        shipped = wheel.read(f"kopf_csi/sandbox/examples/{example}").decode()
        assert shipped == (ROOT / "manifests" / "examples" / example).read_text()
    # The shipped RBAC, which the kit authorizes with under `kit_rbac`; nothing else of the base.
    shipped = wheel.read("kopf_csi/testing/manifests/rbac.yaml").decode()
    assert shipped == (ROOT / "manifests" / "base" / "rbac.yaml").read_text()
    assert not [n for n in names if n.startswith("kopf_csi/testing/manifests/") and
                not n.endswith("/rbac.yaml")]  # fmt: skip
    (entry_points,) = [name for name in names if name.endswith(".dist-info/entry_points.txt")]
    text = wheel.read(entry_points).decode()
    assert "[pytest11]" in text
    assert "kopf_csi = kopf_csi.testing.pytest_plugin" in text
