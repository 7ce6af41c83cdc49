"""The Dockerfile and .dockerignore, checked without Docker (this machine has no daemon).

- multi-stage from python:3.11-slim; the install uses the pinned constraints; bytecode is
  compiled at build time and never written at run time (read-only root file system);
- a numeric non-root USER, the same uid/gid the Deployment runs as;
- the entrypoint is `kopf-csi run`, a console script of the package that exists;
- every COPY source exists and is sent by .dockerignore, which leaves out virtualenvs, git,
  tests and manifests;
- the package the image installs (a wheel built here) holds every default handler module and
  the reference driver's entry point, which the Deployment's second container runs.
"""

from __future__ import annotations

import fnmatch
import json
import pathlib
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile

import pytest
import yaml

from kopf_csi.testing.operator import DEFAULT_MODULES

from .rendering import MANIFESTS, ROOT

DOCKERFILE = ROOT / "Dockerfile"


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    found = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            found.append((word.upper(), rest.strip()))
    return found


def _all(instruction: str) -> list[str]:
    return [rest for word, rest in _instructions() if word == instruction]


def _ignored(path: str) -> bool:
    """Docker's rule: the last matching .dockerignore pattern wins (`!` re-includes)."""
    ignored = False
    for line in (ROOT / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negate, pattern = line.startswith("!"), line.lstrip("!").rstrip("/")
        pattern = pattern.replace("**/", "")
        parts = pathlib.PurePosixPath(path).parts
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        if any(fnmatch.fnmatch(p, pattern) for p in prefixes) or fnmatch.fnmatch(
            parts[-1], pattern
        ):
            ignored = not negate
    return ignored


def test_multi_stage_from_python_slim() -> None:
    (default,) = [rest for rest in _all("ARG") if rest.startswith("PYTHON_IMAGE=")]
    assert default == "PYTHON_IMAGE=python:3.11-slim"
    stages = _all("FROM")
    assert len(stages) == 2
    assert all(stage.startswith("${PYTHON_IMAGE}") for stage in stages)
    assert any("--from=builder" in rest for rest in _all("COPY"))


def test_installs_with_the_pinned_constraints() -> None:
    installs = [r for r in _all("RUN") if "pip install" in r]
    assert installs
    for run in installs:
        for command in run.split("&&"):
            if "pip install" in command:
                assert "-c requirements/constraints.txt" in command, command
    assert "compileall" in " ".join(_all("RUN"))


def test_runtime_user_and_environment_match_the_deployment() -> None:
    (user,) = _all("USER")
    uid, gid = (int(part) for part in user.split(":"))
    assert uid > 0
    deployment = yaml.safe_load((MANIFESTS / "base" / "deployment.yaml").read_text())
    context = deployment["spec"]["template"]["spec"]["securityContext"]
    assert (context["runAsUser"], context["runAsGroup"]) == (uid, gid)
    env = " ".join(_all("ENV"))
    assert "PYTHONDONTWRITEBYTECODE=1" in env
    assert "HOME=/tmp" in env  # an emptyDir in the manifests: nothing written to the image


def test_entrypoint_is_kopf_csi_run() -> None:
    (entrypoint,) = _all("ENTRYPOINT")
    assert json.loads(entrypoint) == ["kopf-csi", "run"]
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["kopf-csi"] == "kopf_csi.cli:main"
    from kopf_csi import cli

    assert callable(cli.main)


def test_copied_sources_exist_and_are_sent() -> None:
    for rest in _all("COPY"):
        if rest.startswith("--from"):
            continue
        *sources, _ = rest.split()
        for source in sources:
            assert (ROOT / source).exists(), source
            assert not _ignored(source.rstrip("/")), f"{source} is excluded by .dockerignore"


@pytest.mark.parametrize(
    "path",
    [".venv/bin/python", ".git/HEAD", "tests/conftest.py", "manifests/base/rbac.yaml",
     ".nox/tests", "src/kopf_csi/__pycache__/cli.cpython-311.pyc", "docs/status.md"],
)  # fmt: skip
def test_dockerignore_leaves_out(path: str) -> None:
    assert _ignored(path)


@pytest.mark.parametrize("path", ["src/kopf_csi/cli.py", "handlers/provisioner.py"])
def test_dockerignore_sends(path: str) -> None:
    assert not _ignored(path)


def test_the_package_holds_the_handlers_and_the_driver(tmp_path: pathlib.Path) -> None:
    """Build the wheel the image installs (no network: the venv's setuptools), from what the
    Dockerfile copies: a checkout's leftovers (a stale `build/`) must not decide it."""
    source = tmp_path / "source"
    for rest in _all("COPY"):
        if rest.startswith("--from"):
            continue
        *paths, _ = rest.split()
        for path in paths:
            copy = shutil.copytree if (ROOT / path).is_dir() else shutil.copy2
            (source / path).parent.mkdir(parents=True, exist_ok=True)
            copy(ROOT / path, source / path)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "--wheel-dir", str(tmp_path), str(source)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (wheel,) = tmp_path.glob("kopf_csi-*.whl")
    files = set(zipfile.ZipFile(wheel).namelist())
    for module in DEFAULT_MODULES:
        assert module.replace(".", "/") + ".py" in files, module
    assert "kopf_csi/driver/__main__.py" in files
    assert "kopf_csi/cli.py" in files
    assert "kopf_csi/py.typed" in files
    assert "kopf_csi/sandbox/examples/storageclasses.yaml" in files  # a link to the base's
    # The handler modules under the project's own name: a top-level `handlers` would clash.
    assert not [name for name in files if name.startswith("handlers/")]
