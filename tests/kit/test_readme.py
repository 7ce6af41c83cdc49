"""The README's handler modules and their test, as a new user runs them: in a fresh virtualenv.

The venv gets this repository installed (not editable, with the `testing` extra, the versions
from `requirements/constraints.txt`: pip's cache and the package index serve them), then a
project of its own is written from the README's blocks marked `<!-- file: PATH -->`, and its
pytest runs there with nothing configured; then the sandbox, with the project's module, from
the project's folder. Slow (a venv and an install: about 20-40 s), but
run by CI like every other test: it needs only the package index CI already uses.
"""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"<!-- file: (\S+)[^>]*-->\n```python\n(.*?)```", re.DOTALL)
# What `pip install .` reads (the sandbox's example manifests among them).
COPIED = ("pyproject.toml", "setup.py", "README.md", "src", "handlers", "manifests")


def readme_files() -> dict[str, str]:
    return dict(BLOCK.findall((ROOT / "README.md").read_text()))


def run(*args: str | pathlib.Path, cwd: pathlib.Path, timeout: float) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "VIRTUAL_ENV"))}
    env.pop("PYTHONPATH", None)  # nothing of this repository's on the path
    done = subprocess.run(
        [str(arg) for arg in args], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=timeout, check=False,
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"{' '.join(map(str, args))}:\n{output[-5000:]}"
    return output


def test_the_readme_names_its_files() -> None:
    assert sorted(readme_files()) == [
        "myproject/only_small.py", "myproject/volume_labels.py", "tests/test_mine.py",
    ]  # fmt: skip


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_readme_example_passes_in_a_fresh_virtualenv(tmp_path: pathlib.Path) -> None:
    source = tmp_path / "kopf-csi"
    source.mkdir()
    for name in COPIED:  # a clean copy: no build/ or egg-info left in the repository
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(path, source / name)
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", venv, cwd=tmp_path, timeout=120)
    python = venv / "bin" / "python"
    constraints = ROOT / "requirements" / "constraints.txt"
    run(
        python, "-m", "pip", "install", "-q", "-c", constraints, f"{source}[testing]",
        cwd=tmp_path, timeout=540,
    )  # fmt: skip

    # The handler modules under the project's own name, no top-level `handlers` package.
    (site,) = (venv / "lib").glob("python3*/site-packages")
    assert (site / "kopf_csi_handlers" / "provisioner.py").is_file()
    assert not (site / "handlers").exists()

    project = tmp_path / "project"  # the README's files only: no __init__.py, no settings
    for name, text in readme_files().items():
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(text)
    # The `pytest` script, as a user types it (not `python -m pytest`, which would put the
    # project's folder on the path by itself).
    output = run(venv / "bin" / "pytest", "-p", "no:cacheprovider", "-q", cwd=project, timeout=300)
    assert "2 passed" in output, output

    # The sandbox with the project's own module, run from the project's folder, as the
    # Quickstart says: the example manifests come with the package, not from a clone.
    output = run(
        python, "-m", "kopf_csi.sandbox", "--dir", tmp_path / "sandbox", "-m",
        "myproject.only_small", cwd=project, timeout=300,
    )  # fmt: skip
    assert "myproject.only_small" in output, output
    assert "stopped: nothing left running" in output, output
