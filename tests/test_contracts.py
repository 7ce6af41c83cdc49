"""The layer contracts (pyproject's [tool.importlinter], run by `nox -s lint`) catch wrong imports.

We test these aspects:
- the real tree keeps every contract;
- a copy of the tree with one deliberately wrong import breaks the contract that forbids it, and
  the report names the contract and the import: a decision module that imports `kube` or
  `asyncio`, a shared module that imports a controller, a module that imports its importer
  back, a controller that imports another, runtime code that imports the testing kit or a
  development tool, a third-party client imported outside its one place.

Each check runs lint-imports in a fresh interpreter, on the tree given by PYTHONPATH.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import tomllib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONTRACTS = {
    contract["id"]: contract["name"]
    for contract in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"][
        "contracts"
    ]
}


def lint_imports(tree: pathlib.Path) -> subprocess.CompletedProcess[str]:
    """lint-imports over `tree` (its src/, handlers/ and devtools/, its pyproject.toml), not the
    installed package: PYTHONPATH comes before the editable install's paths."""
    path = os.pathsep.join([str(tree / "src"), str(tree)])
    env = {**os.environ, "PYTHONPATH": path, "COLUMNS": "500"}  # rich wraps at 80 otherwise
    return subprocess.run(
        [sys.executable, "-c", "from importlinter.cli import lint_imports_command as c; c()",
         "--no-cache", "--no-logo"],
        cwd=tree, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


@pytest.fixture
def tree(tmp_path: pathlib.Path) -> pathlib.Path:
    """A copy of the sources and the contracts, to break."""
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    shutil.copytree(ROOT / "src", tmp_path / "src", ignore=ignore)
    shutil.copytree(ROOT / "handlers", tmp_path / "handlers", ignore=ignore)
    shutil.copytree(ROOT / "devtools", tmp_path / "devtools", ignore=ignore)
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_the_real_tree_keeps_every_contract() -> None:
    done = lint_imports(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"Contracts: {len(CONTRACTS)} kept, 0 broken." in done.stdout


@pytest.mark.parametrize(
    ("module", "statement", "contract", "message"),
    [
        pytest.param(
            "kopf_csi/provisioning/decisions.py", "import kopf_csi.kube", "pure",
            "kopf_csi.provisioning.decisions is not allowed to import kopf_csi.kube",
            id="a decision module imports kube",
        ),
        pytest.param(
            "kopf_csi/resizing/decisions.py", "import asyncio", "pure",
            "kopf_csi.resizing.decisions is not allowed to import asyncio",
            id="a decision module imports asyncio",
        ),
        pytest.param(
            "kopf_csi/provisioning/naming.py", "from kopf_csi import caches", "pure",
            "kopf_csi.provisioning.naming is not allowed to import kopf_csi.caches",
            id="a pure helper reads the shared caches",
        ),
        pytest.param(
            "kopf_csi/queueing.py", "import kopf_csi.provisioning.states", "layers",
            "kopf_csi.queueing is not allowed to import kopf_csi.provisioning",
            id="a shared module imports a controller",
        ),
        pytest.param(
            "kopf_csi/settings.py", "from kopf_csi import flags", "acyclic",
            "No cycles are allowed in kopf_csi",
            id="settings imports the flag table back",
        ),
        pytest.param(
            "kopf_csi/attaching/decisions.py", "import kopf_csi.resizing.status", "controllers",
            "kopf_csi.attaching is not allowed to import kopf_csi.resizing",
            id="a controller imports another",
        ),
        pytest.param(
            "kopf_csi/runtime.py", "import kopf_csi.testing.emulator", "scaffolding",
            "kopf_csi.runtime -> kopf_csi.testing.emulator",
            id="runtime code imports the testing kit",
        ),
        pytest.param(
            "kopf_csi/queueing.py", "import devtools.bench.procfs", "scaffolding",
            "kopf_csi.queueing -> devtools.bench.procfs",
            id="runtime code imports a development tool",
        ),
        pytest.param(
            "kopf_csi/events.py", "import aiohttp", "aiohttp",
            "kopf_csi.events -> aiohttp",
            id="aiohttp outside the client and the servers",
        ),
        pytest.param(
            "kopf_csi/provisioning/operations.py", "import kopf", "kopf",
            "kopf_csi.provisioning.operations -> kopf",
            id="kopf in a controller",
        ),
        pytest.param(
            "kopf_csi/informers.py", "import kubernetes_asyncio.watch", "kubernetes-asyncio",
            "kopf_csi.informers -> kubernetes_asyncio",
            id="kubernetes-asyncio outside kube",
        ),
        pytest.param(
            "kopf_csi/endpoints.py", "import prometheus_client", "prometheus",
            "kopf_csi.endpoints -> prometheus_client",
            id="prometheus-client outside metrics",
        ),
        pytest.param(
            "kopf_csi/kube.py", "import kmock", "sandbox-extra",
            "kopf_csi.kube -> kmock",
            id="the sandbox extra in runtime code",
        ),
        pytest.param(
            "kopf_csi/kube.py", "import yaml", "yaml",
            "kopf_csi.kube -> yaml",
            id="yaml in runtime code",
        ),
        pytest.param(
            "kopf_csi/migration/mapping.py", "import yaml", "yaml",
            "kopf_csi.migration.mapping -> yaml",
            id="yaml in migrate outside its stream module",
        ),
        pytest.param(
            "kopf_csi/driver/node.py", "import grpclib.server", "grpc",
            "kopf_csi.driver.node -> grpclib",
            id="grpclib outside kopf_csi.csi",
        ),
        pytest.param(
            "../handlers/examples/claim_labels.py", "from kopf_csi import kube", "api-only",
            "handlers.examples.claim_labels -> kopf_csi.kube",
            id="an example module imports outside the public API",
        ),
    ],
)  # fmt: skip
def test_a_wrong_import_breaks_its_contract(
    tree: pathlib.Path, module: str, statement: str, contract: str, message: str
) -> None:
    path = tree / "src" / module
    path.write_text(f"{path.read_text()}\n{statement}\n")
    done = lint_imports(tree)
    assert done.returncode == 1, done.stdout + done.stderr
    broken = " ".join(done.stdout.split("Broken contracts", 1)[-1].split())
    assert CONTRACTS[contract] in broken, done.stdout
    assert message in broken, done.stdout
