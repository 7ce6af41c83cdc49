"""The resources the emulated API serves: `Kind` (group, version, plural, kind, scope, whether
it has a /status subresource) and `KINDS`, what the operator and the controller stand-ins touch.

Part of the emulator (``emulator.py`` puts the parts together); pure data.
"""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["KINDS", "Body", "Kind", "defined_by", "established"]

Body = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Kind:
    """One served resource; ``status=True`` adds the /status subresource and the split."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    status: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def custom(self) -> bool:
        """Served from a CustomResourceDefinition (the snapshot kinds), not built in."""
        return self.group not in _BUILT_IN_GROUPS

    @property
    def qualified(self) -> str:
        """``plural.group``, as the real server names a resource in its messages."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


KINDS: tuple[Kind, ...] = (
    Kind("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", True, status=True),
    Kind("", "v1", "persistentvolumes", "PersistentVolume", False, status=True),
    Kind("", "v1", "nodes", "Node", False),
    Kind("", "v1", "secrets", "Secret", True),
    Kind("", "v1", "configmaps", "ConfigMap", True),
    Kind("", "v1", "events", "Event", True),
    Kind("", "v1", "pods", "Pod", True),
    Kind("", "v1", "namespaces", "Namespace", False),
    Kind("storage.k8s.io", "v1", "storageclasses", "StorageClass", False),
    Kind("storage.k8s.io", "v1", "volumeattachments", "VolumeAttachment", False, status=True),
    Kind("storage.k8s.io", "v1", "csinodes", "CSINode", False),
    Kind("storage.k8s.io", "v1", "csidrivers", "CSIDriver", False),
    Kind("storage.k8s.io", "v1", "csistoragecapacities", "CSIStorageCapacity", True),
    Kind("storage.k8s.io", "v1", "volumeattributesclasses", "VolumeAttributesClass", False),
    Kind("coordination.k8s.io", "v1", "leases", "Lease", True),
    Kind("events.k8s.io", "v1", "events", "Event", True),
    Kind("snapshot.storage.k8s.io", "v1", "volumesnapshots", "VolumeSnapshot", True, status=True),
    Kind(
        "snapshot.storage.k8s.io",
        "v1",
        "volumesnapshotcontents",
        "VolumeSnapshotContent",
        False,
        status=True,
    ),
    Kind("snapshot.storage.k8s.io", "v1", "volumesnapshotclasses", "VolumeSnapshotClass", False),
    # Served by every API server; kopf watches it unless told not to (docs/operations.md).
    Kind(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        False,
        status=True,
    ),
    *(
        Kind(
            "groupsnapshot.storage.k8s.io",
            "v1",
            plural,
            kind,
            kind == "VolumeGroupSnapshot",
            status,
        )
        for plural, kind, status in (
            ("volumegroupsnapshots", "VolumeGroupSnapshot", True),
            ("volumegroupsnapshotcontents", "VolumeGroupSnapshotContent", True),
            ("volumegroupsnapshotclasses", "VolumeGroupSnapshotClass", False),
        )
    ),
)
"""What the operator and the controller stand-ins touch. Core ``events`` wins the bare name."""

CRDS = ("apiextensions.k8s.io", "customresourcedefinitions")


def defined_by(crd: Body) -> tuple[Kind, ...]:
    """The resources an apiextensions.k8s.io/v1 CustomResourceDefinition serves: one per served
    version, with /status where that version declares the subresource."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    group, plural, kind = spec.get("group"), names.get("plural"), names.get("kind")
    if not (group and plural and kind):
        return ()
    return tuple(
        Kind(
            group,
            version["name"],
            plural,
            kind,
            namespaced=spec.get("scope") == "Namespaced",
            status="status" in (version.get("subresources") or {}),
        )
        for version in spec.get("versions") or ()
        if version.get("served") and version.get("name")
    )


def established(crd: Body, now: str) -> Body:
    """The status a CustomResourceDefinition gets from the API server's controllers once its
    names are accepted and it is served (apiextensions-apiserver's naming and establishing
    controllers): what ``kubectl wait --for=condition=Established`` waits for."""
    spec = crd.get("spec") or {}
    names = dict(spec.get("names") or {})
    if names.get("kind"):  # SetDefaults_CustomResourceDefinitionSpec
        names.setdefault("singular", names["kind"].lower())
        names.setdefault("listKind", f"{names['kind']}List")
    conditions = [
        ("NamesAccepted", "NoConflicts", "no conflicts found"),
        ("Established", "InitialNamesAccepted", "the initial names have been accepted"),
    ]
    return {
        "acceptedNames": names,
        "conditions": [
            {
                "type": type_,
                "status": "True",
                "lastTransitionTime": now,
                "reason": reason,
                "message": message,
            }
            for type_, reason, message in conditions
        ],
        "storedVersions": [v["name"] for v in spec.get("versions") or () if v.get("storage")],
    }


_BUILT_IN_GROUPS = frozenset(
    {"", "storage.k8s.io", "coordination.k8s.io", "events.k8s.io", "apiextensions.k8s.io"}
)
