"""RBAC that a handler module declares next to its code, and its ClusterRole and Role as YAML.

A module says what it asks the API for, at its top level:

    api.rbac.declare(
        api.rbac.cluster(api.NAMESPACES, "list", "watch", why="the annotations, watched"),
        api.rbac.namespaced(api.CONFIGMAPS, "get", why="its settings, in our namespace"),
    )

`cluster` rules go into a ClusterRole (every namespace, and cluster-scoped kinds);
`namespaced` ones into a Role in the operator's own namespace. `kopf-csi rbac -m MODULE`
prints both, with their bindings to the operator's ServiceAccount, to apply beside the base
(`manifests/modules/` holds the examples', generated so).

`modules.load` keeps each module's declarations with the kopf registry it loads into
(`declared`). This module renders plain dicts and text: no YAML library is needed.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import re
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

from kopf_csi import kube

__all__ = ["Rule", "cluster", "declare", "namespaced"]
"""What `api.rbac` offers modules; the rest is for the loader, `kopf-csi rbac` and the kit."""

ACCOUNT = "kopf-csi"
"""The operator's ServiceAccount in the shipped manifests."""
NAMESPACE = "kopf-csi"
"""The operator's namespace in the shipped manifests (an overlay may change both)."""

Body = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Rule:
    """One PolicyRule a module needs: a ClusterRole's (`cluster_wide`) or its namespace Role's."""

    group: str
    resource: str  # the plural, or `plural/subresource`
    verbs: tuple[str, ...]
    cluster_wide: bool
    why: str = ""

    def policy(self) -> Body:
        return {"apiGroups": [self.group], "resources": [self.resource], "verbs": list(self.verbs)}

    def __str__(self) -> str:
        scope = "cluster-wide" if self.cluster_wide else "in the operator's namespace"
        group = self.group or "core"
        return f"{', '.join(self.verbs)} on {group}/{self.resource} ({scope})"


def _rule(
    resource: kube.Resource | str, verbs: Sequence[str], *, cluster_wide: bool, why: str
) -> Rule:
    if not verbs:
        raise ValueError("a rule needs at least one verb (get, list, watch, create, patch, ...)")
    if isinstance(resource, kube.Resource):
        group, plural = resource.group, resource.plural
    else:
        plural, _, group = resource.partition(".")  # kubectl's `plural.group`
    return Rule(group, plural, tuple(verbs), cluster_wide, why)


def cluster(resource: kube.Resource | str, *verbs: str, why: str = "") -> Rule:
    """`verbs` on `resource` in every namespace (and on cluster-scoped kinds): a ClusterRole
    rule. `resource` is an `api.Resource`, or `plural[.group]` (`volumesnapshots.snapshot.
    storage.k8s.io`, `persistentvolumeclaims/status`)."""
    return _rule(resource, verbs, cluster_wide=True, why=why)


def namespaced(resource: kube.Resource | str, *verbs: str, why: str = "") -> Rule:
    """`verbs` on `resource` in the operator's own namespace only: a Role rule."""
    return _rule(resource, verbs, cluster_wide=False, why=why)


_declared: list[Rule] = []  # every declaration of this process, in order (`mark`, `since`)


def declare(*rules: Rule) -> None:
    """The rules the calling module needs (call it at the module's top level)."""
    _declared.extend(rules)


def mark() -> int:
    """Where the declarations are now: `since(mark)` gives those made after."""
    return len(_declared)


def since(position: int) -> tuple[Rule, ...]:
    return tuple(_declared[position:])


_by_registry: weakref.WeakKeyDictionary[Any, dict[str, tuple[Rule, ...]]] = (
    weakref.WeakKeyDictionary()
)


def assign(registry: Any, module: str, rules: Sequence[Rule]) -> None:
    """Keep `module`'s rules with the kopf registry it was loaded into (`modules.load`)."""
    _by_registry.setdefault(registry, {})[module] = tuple(dict.fromkeys(rules))


def declared(registry: Any) -> dict[str, tuple[Rule, ...]]:
    """The declarations of the modules loaded into `registry`, by module, in load order."""
    return {module: rules for module, rules in _by_registry.get(registry, {}).items() if rules}


def role_name(module: str) -> str:
    """`kopf-csi-<the module's last name>`, lowercase with dashes (`namespace_quota` →
    `kopf-csi-namespace-quota`; a file path by its stem)."""
    if module.endswith(".py") or "/" in module or "\\" in module:
        last = pathlib.PurePath(module).stem
    else:
        last = module.rpartition(".")[2]
    return "kopf-csi-" + re.sub(r"[^a-z0-9]+", "-", last.lower()).strip("-")


def manifests(
    declarations: Mapping[str, Sequence[Rule]],
    *,
    namespace: str = NAMESPACE,
    account: str = ACCOUNT,
) -> list[Body]:
    """A ClusterRole and a Role (each only if needed) per module, each with its binding to the
    operator's ServiceAccount."""
    objects: list[Body] = []
    subject = {"kind": "ServiceAccount", "name": account, "namespace": namespace}
    for module, rules in declarations.items():
        name = role_name(module)
        for cluster_wide in (True, False):
            chosen = [rule.policy() for rule in rules if rule.cluster_wide is cluster_wide]
            if not chosen:
                continue
            kind = "ClusterRole" if cluster_wide else "Role"
            where = {} if cluster_wide else {"namespace": namespace}
            objects.append(
                {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind,
                 "metadata": {"name": name, **where}, "rules": chosen}
            )  # fmt: skip
            objects.append(
                {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": f"{kind}Binding",
                 "metadata": {"name": name, **where}, "subjects": [subject],
                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind,
                             "name": name}}
            )  # fmt: skip
    return objects


def to_yaml(declarations: Mapping[str, Sequence[Rule]], **kwargs: Any) -> str:
    """`manifests()` as one YAML stream, each module's rules and reasons as comments."""
    lines = [
        "# The RBAC of kopf-csi handler modules, from their declarations (`kopf-csi rbac`).",
        "# Apply it beside the base (manifests/base/rbac.yaml), or add it to your kustomization.",
    ]
    for module, rules in declarations.items():
        lines.append(f"# {module}:")
        lines.extend(f"#   {rule}" + (f": {rule.why}" if rule.why else "") for rule in rules)
    documents = [_document(obj) for obj in manifests(declarations, **kwargs)]
    return "\n".join(lines) + "\n" + "---\n".join(documents)


def _document(obj: Body) -> str:
    return "".join(f"{line}\n" for line in _lines(obj, 0))


def _scalar(value: Any) -> str:
    text = str(value)
    if text == "" or re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9./_-]*", text) is None:
        return json.dumps(text)  # a JSON string is a YAML string
    return text


def _lines(value: Any, indent: int) -> list[str]:
    pad = " " * indent
    lines: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, dict):
                lines.append(f"{pad}{key}:")
                lines.extend(_lines(item, indent + 2))
            elif isinstance(item, list) and all(isinstance(x, str) for x in item):
                lines.append(f"{pad}{key}: [{', '.join(_scalar(x) for x in item)}]")
            elif isinstance(item, list):
                lines.append(f"{pad}{key}:")
                for element in item:
                    first, *rest = _lines(element, indent + 4)
                    lines.append(f"{pad}  - {first.lstrip()}")
                    lines.extend(rest)
            else:
                lines.append(f"{pad}{key}: {_scalar(item)}")
    return lines
