"""What the API server fills in on every write of an object that left it out (its defaulting).

A real server runs its `SetDefaults_*` functions when it decodes a create or an update, before
storing the object: a StorageClass written without `reclaimPolicy` is stored with `Delete`
(`pkg/apis/storage/v1/defaults.go`), so a volume provisioned from it gets `Delete` and is removed
with its claim. Without this, a test's class without the field gave volumes no policy at all, kept
Released forever, which no real cluster does.

Part of the emulator (the store calls it on every create and update); pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kopf_csi.testing.kinds import Body, Kind

__all__ = ["apply"]

_TOP_LEVEL: Mapping[tuple[str, str], Mapping[str, Any]] = {
    ("storage.k8s.io", "storageclasses"): {
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "Immediate",
    },
}
"""Top-level fields defaulted when absent (or null), by (group, plural)."""


def apply(kind: Kind, obj: Body) -> Body:
    """`obj` with the server's defaults for what it leaves out (changed in place, returned)."""
    for field, value in _TOP_LEVEL.get((kind.group, kind.plural), {}).items():
        if obj.get(field) is None:
            obj[field] = value
    return obj
