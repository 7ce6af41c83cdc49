"""What to explain: `KIND/[NAMESPACE/]NAME`, with kubectl's names and short names for KIND."""

from __future__ import annotations

import dataclasses

__all__ = ["KINDS", "Target", "TargetError", "parse_target"]


class TargetError(ValueError):
    """The argument names no kind we explain, or is not `KIND/[NAMESPACE/]NAME`."""


@dataclasses.dataclass(frozen=True)
class Kind:
    name: str  # the canonical name, as in the output (`persistentvolumeclaim`)
    namespaced: bool
    aliases: tuple[str, ...]  # kubectl's plural, singular and short names


KINDS: tuple[Kind, ...] = (
    Kind("persistentvolumeclaim", True, ("persistentvolumeclaims", "pvc")),
    Kind("persistentvolume", False, ("persistentvolumes", "pv")),
    Kind("volumeattachment", False, ("volumeattachments", "va")),
    Kind("volumesnapshot", True, ("volumesnapshots", "vs")),
    Kind("volumesnapshotcontent", False, ("volumesnapshotcontents", "vsc")),
    Kind("volumegroupsnapshot", True, ("volumegroupsnapshots", "vgs")),
)
_BY_ALIAS = {alias: kind for kind in KINDS for alias in (kind.name, *kind.aliases)}


@dataclasses.dataclass(frozen=True)
class Target:
    kind: str
    name: str
    namespace: str | None = None

    def __str__(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.kind}/{where}{self.name}"


def parse_target(text: str, *, default_namespace: str | None) -> Target:
    """`pvc/ns/data`, `pvc/data` (in `default_namespace`), `pv/pvc-123`; kubectl's kind names,
    also with a group (`volumesnapshots.snapshot.storage.k8s.io/ns/snap`)."""
    parts = text.split("/")
    if len(parts) not in (2, 3) or not all(parts):
        raise TargetError(f"{text!r} is not KIND/[NAMESPACE/]NAME (such as pvc/default/data)")
    alias = parts[0].lower().split(".", 1)[0]
    kind = _BY_ALIAS.get(alias)
    if kind is None:
        known = ", ".join(kind.aliases[1] for kind in KINDS)
        raise TargetError(f"cannot explain {parts[0]!r}: the kinds explained are {known}")
    if kind.namespaced:
        namespace = parts[1] if len(parts) == 3 else default_namespace or "default"
        return Target(kind.name, parts[-1], namespace)
    if len(parts) == 3:
        raise TargetError(f"{kind.name} is not namespaced: give {parts[0]}/{parts[2]}")
    return Target(kind.name, parts[1])
