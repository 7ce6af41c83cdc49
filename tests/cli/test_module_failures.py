"""A handler module that fails on import: its file, line and error come first in the log line
(`module_failed_to_load`), before the traceback, JSON logs included; the module's own name, not
the list of every module loaded."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import kopf
import pytest

from kopf_csi import modules


@pytest.fixture
def bad_module(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "bad_module.py"
    path.write_text("import kopf\n\n\ndef broken(:\n    pass\n")
    return path


def test_a_syntax_error_names_the_file_the_line_and_the_module(bad_module: pathlib.Path) -> None:
    with pytest.raises(SyntaxError) as info:
        modules.load([str(bad_module)], registry=kopf.OperatorRegistry())
    assert modules.failure(info.value) == {
        "error": f"{bad_module}, line 4: SyntaxError: invalid syntax",
        "module": str(bad_module),
    }


def test_an_error_on_import_names_its_line(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "raises.py"
    path.write_text("x = 1\nraise KeyError('team')\n")
    with pytest.raises(KeyError) as info:
        modules.load([str(path)], registry=kopf.OperatorRegistry())
    assert modules.failure(info.value) == {
        "error": f"{path}, line 2: KeyError: 'team'",
        "module": str(path),
    }


def test_kopf_csi_run_logs_it_first_in_json(bad_module: pathlib.Path) -> None:
    kubeconfig = bad_module.parent / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n")
    done = subprocess.run(
        [sys.executable, "-m", "kopf_csi", "run", "-m", str(bad_module),
         f"--kubeconfig={kubeconfig}", "--log-format=json"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    line = next(line for line in done.stderr.splitlines() if "module_failed_to_load" in line)
    assert line.startswith(f'{{"error":"{bad_module}, line 4: SyntaxError: invalid syntax"')
    record = json.loads(line)
    assert record["module"] == str(bad_module)
    assert "modules" not in record
