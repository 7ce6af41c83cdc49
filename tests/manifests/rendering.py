"""Render the kustomizations under manifests/, and read RBAC out of the rendered objects.

`render()` runs `kubectl kustomize` (the real renderer) when kubectl is installed; otherwise
`read_resources()` follows the `resources:` lists and reads the files as they are, which is
enough for the RBAC checks (our kustomizations only add labels and set images). A test
compares the two wherever kubectl exists, so the fallback cannot drift.

RBAC evaluation follows the API server's RBAC authorizer for resource requests: a rule matches
when its apiGroups, resources (``plural`` or ``plural/subresource``) and verbs contain the
request's (or ``*``). A ClusterRoleBinding grants cluster-wide; a RoleBinding grants only in its
own namespace. Rules with ``resourceNames`` are treated as never matching, because the request
log does not keep names (and `list`, `watch` and `create` cannot be limited by name anyway).
"""

from __future__ import annotations

import dataclasses
import pathlib
import shutil
import subprocess
from collections.abc import Iterable, Iterator
from typing import Any

import yaml

from kopf_csi.testing.requestlog import Access

ROOT = pathlib.Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
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


@dataclasses.dataclass(frozen=True)
class Grant:
    """The rules of one role, as bound to a subject: cluster-wide, or in one namespace."""

    role: str  # "ClusterRole/name" or "Role/namespace/name", for messages
    namespace: str | None
    rules: tuple[Body, ...]

    def matching(self, access: Access) -> list[Body]:
        if self.namespace is not None and access.namespace != self.namespace:
            return []
        return [rule for rule in self.rules if rule_matches(rule, access)]


def rule_matches(rule: Body, access: Access) -> bool:
    if rule.get("resourceNames"):
        return False
    groups, resources, verbs = (
        rule.get("apiGroups", []),
        rule.get("resources", []),
        rule.get("verbs", []),
    )
    return (
        (access.group in groups or "*" in groups)
        and (access.rbac_resource in resources or "*" in resources)
        and (access.verb in verbs or "*" in verbs)
    )


def grants(objects: list[Body], *, account: str, namespace: str) -> list[Grant]:
    """Every role bound to the ServiceAccount `namespace/account`, with where it applies."""

    def bound(binding: Body) -> bool:
        return any(
            subject.get("kind") == "ServiceAccount"
            and subject.get("name") == account
            and subject.get("namespace", binding["metadata"].get("namespace")) == namespace
            for subject in binding.get("subjects", [])
        )

    roles = {
        (obj["kind"], obj["metadata"].get("namespace"), obj["metadata"]["name"]): obj
        for obj in objects
        if obj.get("kind") in ("ClusterRole", "Role")
    }
    found: list[Grant] = []
    for binding in objects:
        if binding.get("kind") not in ("ClusterRoleBinding", "RoleBinding") or not bound(binding):
            continue
        where = binding["metadata"].get("namespace") if binding["kind"] == "RoleBinding" else None
        ref = binding["roleRef"]
        key = (ref["kind"], where if ref["kind"] == "Role" else None, ref["name"])
        role = roles.get(key)
        assert role is not None, f"{binding['kind']} {binding['metadata']['name']}: no {key}"
        label = "/".join(part for part in key if part)
        found.append(Grant(label, where, tuple(role.get("rules", []))))
    return found


def permissions(grant: Grant) -> Iterator[tuple[str, str, str]]:
    """Each (group, resource, verb) one grant's rules name, expanded."""
    for rule in grant.rules:
        for group in rule.get("apiGroups", []):
            for resource in rule.get("resources", []):
                for verb in rule.get("verbs", []):
                    yield group, resource, verb
