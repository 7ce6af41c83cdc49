"""Render the kustomizations under manifests/, and read RBAC out of the rendered objects.

`render()` runs `kubectl kustomize` (the real renderer) when kubectl is installed; otherwise
`read_resources()` follows the `resources:` lists and reads the files as they are, which is
enough for the RBAC checks (our kustomizations only add labels and set images). A test
compares the two wherever kubectl exists, so the fallback cannot drift.

`rbac()` is every RBAC object we ship: the base's, and each optional module's
(`RBAC_DIRECTORIES`). Evaluating them is the emulator's authorizer's business
(`kopf_csi.testing.authorization`).
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess
from collections.abc import Iterable
from typing import Any

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
RBAC_DIRECTORIES = ("", "modules/namespace-quota")  # the base, and the example module's own
RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
Body = dict[str, Any]


def kubectl() -> str | None:
    return shutil.which("kubectl")


def kustomize(directory: pathlib.Path) -> list[Body]:
    """`kubectl kustomize <directory>`, parsed; fails with kubectl's own message."""
    binary = kubectl()
    assert binary is not None, "kubectl is not installed"
    done = subprocess.run(
        [binary, "kustomize", str(directory)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, f"kubectl kustomize {directory} failed:\n{done.stderr}"
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def read_resources(directory: pathlib.Path) -> list[Body]:
    """The objects a kustomization's `resources:` name, read without any transformation."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    objects: list[Body] = []
    for entry in kustomization.get("resources", []):
        path = directory / entry
        if path.is_dir():
            objects.extend(read_resources(path))
        else:
            objects.extend(doc for doc in yaml.safe_load_all(path.read_text()) if doc)
    return objects


def render(directory: pathlib.Path) -> list[Body]:
    return kustomize(directory) if kubectl() else read_resources(directory)


def find(objects: Iterable[Body], kind: str, name: str | None = None) -> list[Body]:
    return [
        obj
        for obj in objects
        if obj.get("kind") == kind and (name is None or obj["metadata"]["name"] == name)
    ]


def rbac() -> list[Body]:
    """The ServiceAccounts, roles and bindings of every directory in RBAC_DIRECTORIES."""
    return [
        obj
        for directory in RBAC_DIRECTORIES
        for obj in render(MANIFESTS / directory)
        if obj.get("kind") in RBAC_KINDS
    ]
