"""The public module API (`kopf_csi.api`): what the examples and the README may import, and
its reference in docs/modules.md.

- the example handler modules (`handlers/examples/`) import nothing of kopf-csi but
  `kopf_csi.api` (the import contract `api-only` says the same, for `nox -s lint`);
- the README's Python blocks import nothing of kopf-csi but `kopf_csi.api`, and the testing
  kit's `kopf_csi.testing.pytest_plugin` in tests;
- every public name exists, and docs/modules.md's reference is the one the docstrings give
  (`python -m devtools.apiref --write` writes it).
"""

from __future__ import annotations

import ast
import pathlib
import re

import pytest

from devtools import apiref
from kopf_csi import api

ROOT = pathlib.Path(__file__).resolve().parents[2]
PUBLIC = {"kopf_csi.api"}
PUBLIC_FOR_TESTS = PUBLIC | {"kopf_csi.testing.pytest_plugin"}
PYTHON = re.compile(r"```python\n(.*?)```", re.DOTALL)


def kopf_csi_imports(source: str) -> set[str]:
    """Every `kopf_csi...` module that `source` imports (`from kopf_csi import api` is
    `kopf_csi.api`)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "kopf_csi":
                found.update(f"kopf_csi.{alias.name}" for alias in node.names)
            else:
                found.add(node.module)
    return {name for name in found if name == "kopf_csi" or name.startswith("kopf_csi.")}


def test_the_checker_sees_internal_imports() -> None:
    source = "import kopf_csi.on\nfrom kopf_csi import kube, api\nfrom kopf_csi.api import on\n"
    assert kopf_csi_imports(source) == {"kopf_csi.on", "kopf_csi.kube", "kopf_csi.api"}


@pytest.mark.parametrize(
    "path", sorted((ROOT / "handlers" / "examples").glob("*.py")), ids=lambda path: path.name
)
def test_the_examples_import_only_the_public_api(path: pathlib.Path) -> None:
    assert kopf_csi_imports(path.read_text()) <= PUBLIC


def test_the_readme_imports_only_the_public_api() -> None:
    blocks = PYTHON.findall((ROOT / "README.md").read_text())
    assert len(blocks) >= 4  # the hook, the stream handler, the provisioner, the test
    internal = {
        name for block in blocks for name in kopf_csi_imports(block) if name not in PUBLIC_FOR_TESTS
    }
    assert not internal, f"the README imports internal modules: {sorted(internal)}"


def test_every_public_name_is_there() -> None:
    missing = [name for name in api.__all__ if not hasattr(api, name)]
    assert not missing


def test_the_reference_in_docs_is_current() -> None:
    page = (ROOT / "docs" / "modules.md").read_text()
    assert apiref.page_with_reference(page) == page, "run: python -m devtools.apiref --write"
