"""The RBAC kopf-csi needs that a chart's ServiceAccount lacks: a ClusterRole and a Role of
our own, each with its binding; the chart's own objects are never edited.

`CLUSTER_RULES` and `NAMESPACE_RULES` are the rules of `manifests/base/rbac.yaml` (a test
pins that they are the same). What the ServiceAccount has is read from the stream: the
ClusterRoleBindings and RoleBindings naming it, and the roles they refer to. A permission is
(API group, resource, verb); a rule restricted to `resourceNames` grants none of them whole.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["CLUSTER_RULES", "MANAGED_BY", "NAMESPACE_RULES", "Missing", "missing", "objects"]

MANAGED_BY = "kopf-csi-migrate"
"""`app.kubernetes.io/managed-by` of what `kopf-csi migrate` adds (and `--back` drops)."""

Rule = Mapping[str, Sequence[str]]

CLUSTER_RULES: tuple[Rule, ...] = (
    {"apiGroups": [""], "resources": ["persistentvolumes"],
     "verbs": ["get", "list", "watch", "create", "patch", "delete"]},
    {"apiGroups": [""], "resources": ["persistentvolumeclaims"],
     "verbs": ["get", "list", "watch", "patch"]},
    {"apiGroups": [""], "resources": ["persistentvolumeclaims/status"], "verbs": ["patch"]},
    {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["list", "create", "patch"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "watch"]},
    {"apiGroups": ["storage.k8s.io"], "resources": ["storageclasses", "csinodes"],
     "verbs": ["list", "watch"]},
    {"apiGroups": ["storage.k8s.io"], "resources": ["volumeattachments"],
     "verbs": ["list", "watch", "patch"]},
    {"apiGroups": ["storage.k8s.io"], "resources": ["volumeattachments/status"],
     "verbs": ["patch"]},
    {"apiGroups": ["storage.k8s.io"], "resources": ["volumeattributesclasses"], "verbs": ["get"]},
    {"apiGroups": ["snapshot.storage.k8s.io"], "resources": ["volumesnapshots"],
     "verbs": ["get", "list", "patch"]},
    {"apiGroups": ["snapshot.storage.k8s.io"], "resources": ["volumesnapshotcontents"],
     "verbs": ["get", "list", "watch", "patch"]},
    {"apiGroups": ["snapshot.storage.k8s.io"], "resources": ["volumesnapshotcontents/status"],
     "verbs": ["patch"]},
    {"apiGroups": ["snapshot.storage.k8s.io"], "resources": ["volumesnapshotclasses"],
     "verbs": ["list", "watch"]},
    {"apiGroups": ["groupsnapshot.storage.k8s.io"], "resources": ["volumegroupsnapshotcontents"],
     "verbs": ["get", "list", "watch", "patch"]},
    {"apiGroups": ["groupsnapshot.storage.k8s.io"],
     "resources": ["volumegroupsnapshotcontents/status"], "verbs": ["patch"]},
    {"apiGroups": ["groupsnapshot.storage.k8s.io"], "resources": ["volumegroupsnapshotclasses"],
     "verbs": ["list", "watch"]},
)  # fmt: skip
"""Cluster-wide: the objects the sidecars watch or write in every namespace."""

NAMESPACE_RULES: tuple[Rule, ...] = (
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
     "verbs": ["get", "create", "update"]},
    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "create", "patch"]},
    {"apiGroups": ["storage.k8s.io"], "resources": ["csistoragecapacities"],
     "verbs": ["list", "create", "patch", "delete"]},
)  # fmt: skip
"""In the operator's own namespace: Leases, the in-flight journal, CSIStorageCapacity."""

Permission = tuple[str, str, str]


def permissions(rules: Iterable[Mapping[str, Any]]) -> set[Permission]:
    """Every (group, resource, verb) the rules grant whole (not per resource name)."""
    granted = set()
    for rule in rules:
        if rule.get("resourceNames"):
            continue
        for group in rule.get("apiGroups") or []:
            for resource in rule.get("resources") or []:
                for verb in rule.get("verbs") or []:
                    granted.add((group, resource, verb))
    return granted


def _covers(granted: set[Permission], wanted: Permission) -> bool:
    group, resource, verb = wanted
    return any(
        g in (group, "*") and r in (resource, "*") and v in (verb, "*") for g, r, v in granted
    )


@dataclasses.dataclass(frozen=True)
class Missing:
    account: str  # namespace/name
    cluster: list[dict[str, list[str]]]
    namespaced: list[dict[str, list[str]]]
    known: bool  # whether the stream had any binding of the account at all

    @property
    def empty(self) -> bool:
        return not self.cluster and not self.namespaced


def missing(stream: Iterable[Mapping[str, Any]], *, namespace: str, account: str) -> Missing:
    """What kopf-csi needs that the account is not granted by the stream's RBAC."""
    objects = list(stream)
    roles = {
        (obj.get("kind"), (obj.get("metadata") or {}).get("namespace"),
         (obj.get("metadata") or {}).get("name")): obj.get("rules") or []
        for obj in objects if obj.get("kind") in ("ClusterRole", "Role")
    }  # fmt: skip
    cluster_wide: set[Permission] = set()
    in_namespace: set[Permission] = set()
    known = False
    for obj in objects:
        kind = obj.get("kind")
        if kind not in ("ClusterRoleBinding", "RoleBinding") or not _binds(obj, namespace, account):
            continue
        known = True
        ref = obj.get("roleRef") or {}
        where = (obj.get("metadata") or {}).get("namespace") or namespace
        key = (
            ref.get("kind"),
            None if ref.get("kind") == "ClusterRole" else where,
            ref.get("name"),
        )
        granted = permissions(roles.get(key, []))
        if kind == "ClusterRoleBinding":
            cluster_wide |= granted
        elif where == namespace:
            in_namespace |= granted
    cluster = [p for p in sorted(permissions(CLUSTER_RULES)) if not _covers(cluster_wide, p)]
    local = [
        p for p in sorted(permissions(NAMESPACE_RULES))
        if not _covers(cluster_wide | in_namespace, p)
    ]  # fmt: skip
    return Missing(f"{namespace}/{account}", _rules(cluster), _rules(local), known)


def _binds(binding: Mapping[str, Any], namespace: str, account: str) -> bool:
    where = (binding.get("metadata") or {}).get("namespace")
    return any(
        subject.get("kind") == "ServiceAccount"
        and subject.get("name") == account
        and (subject.get("namespace") or where) == namespace
        for subject in binding.get("subjects") or []
    )


def _rules(wanted: Iterable[Permission]) -> list[dict[str, list[str]]]:
    """Permissions as rules: one per group and verbs, with the resources that share them."""
    verbs: dict[tuple[str, str], list[str]] = {}
    for group, resource, verb in wanted:
        verbs.setdefault((group, resource), []).append(verb)
    merged: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for (group, resource), names in verbs.items():
        merged.setdefault((group, tuple(_ordered(names))), []).append(resource)
    return [
        {"apiGroups": [group], "resources": sorted(resources), "verbs": list(names)}
        for (group, names), resources in merged.items()
    ]


_VERB_ORDER = ("get", "list", "watch", "create", "update", "patch", "delete")


def _ordered(verbs: Iterable[str]) -> list[str]:
    return sorted(set(verbs), key=lambda verb: (*_VERB_ORDER, verb).index(verb))


def objects(found: Missing, *, name: str) -> list[dict[str, Any]]:
    """The ClusterRole, Role and bindings granting what is missing (none when nothing is)."""
    namespace, _, account = found.account.partition("/")
    labels = {"app.kubernetes.io/managed-by": MANAGED_BY}
    subject = [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]
    result: list[dict[str, Any]] = []
    rbac = "rbac.authorization.k8s.io/v1"
    for kind, rules, scope in (
        ("ClusterRole", found.cluster, {}),
        ("Role", found.namespaced, {"namespace": namespace}),
    ):
        if not rules:
            continue
        meta = {"name": name, **scope, "labels": labels}
        result.append({"apiVersion": rbac, "kind": kind, "metadata": meta, "rules": rules})
        result.append({
            "apiVersion": rbac,
            "kind": f"{kind}Binding",
            "metadata": dict(meta),
            "subjects": subject,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name},
        })  # fmt: skip
    return result
