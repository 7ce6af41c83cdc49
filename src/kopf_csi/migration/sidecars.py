"""Which containers are Go CSI controller sidecars: found by image name, with their versions.

A sidecar is a container whose image's last path component is one of `IMAGES`
(`registry.k8s.io/sig-storage/csi-provisioner:v6.3.0`, a mirror, or a build with a suffix such
as `v5.2.0-eks-1-33-1`). Its major version must not be newer than the one whose behaviour
kopf-csi matches (`TRACKED`, from the sidecars' sources it was ported from); an older one is
fine, a newer one (or a tag that says no version, like `latest`) is refused by the mapping.

Workloads are the kinds whose pod template may hold the controller sidecars.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

__all__ = [
    "IMAGES",
    "ROLES",
    "TRACKED",
    "WORKLOAD_KINDS",
    "Image",
    "parse_image",
    "pod_spec",
    "role_of",
]

ROLES = ("provisioner", "attacher", "resizer", "snapshotter", "health")
"""The sidecar roles, in the order their flags are written."""

IMAGES: Mapping[str, str] = {
    "csi-provisioner": "provisioner",
    "csi-attacher": "attacher",
    "csi-resizer": "resizer",
    "csi-snapshotter": "snapshotter",
    "csi-external-health-monitor-controller": "health",
}
"""Image name → role."""

TRACKED: Mapping[str, int] = {
    "provisioner": 6,  # external-provisioner v6 (sig-storage-lib-external-provisioner v13)
    "attacher": 4,
    "resizer": 2,
    "snapshotter": 8,
    "health": 0,
}
"""The newest major version of each sidecar whose behaviour kopf-csi matches."""

WORKLOAD_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Pod")

_VERSION = re.compile(r"v?(\d+)(?:\.\d+)*(?:[-+].*)?")


@dataclasses.dataclass(frozen=True)
class Image:
    reference: str
    name: str  # the last path component: csi-provisioner
    tag: str | None
    digest: str | None

    @property
    def major(self) -> int | None:
        """The major version from the tag, or None when the tag says none (`latest`)."""
        match = _VERSION.fullmatch(self.tag or "")
        return int(match.group(1)) if match else None


def parse_image(reference: str) -> Image:
    rest, _, digest = reference.partition("@")
    _, _, last = rest.rpartition("/")
    name, _, tag = last.partition(":")
    return Image(reference=reference, name=name, tag=tag or None, digest=digest or None)


def role_of(container: Mapping[str, Any]) -> str | None:
    """The sidecar role of a container, by its image; None for any other container."""
    return IMAGES.get(parse_image(str(container.get("image") or "")).name)


def pod_spec(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    """The pod spec of a workload (its template's), or None for other kinds."""
    if obj.get("kind") not in WORKLOAD_KINDS:
        return None
    if obj.get("kind") == "Pod":
        spec = obj.get("spec")
    else:
        spec = ((obj.get("spec") or {}).get("template") or {}).get("spec")
    return spec if isinstance(spec, dict) else None
