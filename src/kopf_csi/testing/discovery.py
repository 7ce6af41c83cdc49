"""What the emulated API server says about itself: ``/version`` and each group version's resources.

kubectl resolves ``pvc``, ``vs`` or ``all`` through discovery (short names, categories), and
compares its own version with ``/version``. The facts per resource are the real server's
(kube-apiserver v1.36.2 and external-snapshotter v8's CRDs), one row each below, and the bodies
are laid out as the real server lays them out: resources sorted by name, each followed by its
subresources, which have an empty singular name and the verbs get, patch and update.
``storageVersionHash`` is left out: it is optional, and no client of the emulator reads it.

Pure: the emulator passes the kinds it serves (``emulator.Kind``: group, version, plural, kind,
namespaced, status).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any, Protocol

__all__ = [
    "KUBERNETES_VERSION",
    "Facts",
    "Served",
    "core_versions",
    "facts",
    "group_version",
    "server_version",
]

KUBERNETES_VERSION = "v1.36.2"
"""The version the emulator behaves as (docs/decisions.md, real-server-bodies)."""


class Served(Protocol):
    """The parts of ``emulator.Kind`` that discovery needs."""

    @property
    def group(self) -> str: ...
    @property
    def version(self) -> str: ...
    @property
    def plural(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def namespaced(self) -> bool: ...
    @property
    def status(self) -> bool: ...


_ALL = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
# A CRD's verbs, in the order the apiextensions server lists them.
_CUSTOM = ("delete", "deletecollection", "get", "list", "patch", "create", "update", "watch")


@dataclasses.dataclass(frozen=True)
class Facts:
    """One resource's discovery facts beyond what ``Kind`` says."""

    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    verbs: tuple[str, ...] = _ALL


_FACTS: dict[tuple[str, str], Facts] = {
    ("", "configmaps"): Facts(("cm",)),
    ("", "events"): Facts(("ev",)),
    ("", "namespaces"): Facts(
        ("ns",), verbs=("create", "delete", "get", "list", "patch", "update", "watch")
    ),
    ("", "nodes"): Facts(("no",)),
    ("", "persistentvolumeclaims"): Facts(("pvc",)),
    ("", "persistentvolumes"): Facts(("pv",)),
    ("", "pods"): Facts(("po",), ("all",)),
    ("", "secrets"): Facts(),
    ("apiextensions.k8s.io", "customresourcedefinitions"): Facts(
        ("crd", "crds"), ("api-extensions",)
    ),
    ("coordination.k8s.io", "leases"): Facts(),
    ("events.k8s.io", "events"): Facts(("ev",)),
    ("storage.k8s.io", "csidrivers"): Facts(),
    ("storage.k8s.io", "csinodes"): Facts(),
    ("storage.k8s.io", "csistoragecapacities"): Facts(),
    ("storage.k8s.io", "storageclasses"): Facts(("sc",)),
    ("storage.k8s.io", "volumeattachments"): Facts(),
    ("storage.k8s.io", "volumeattributesclasses"): Facts(("vac",)),
    ("snapshot.storage.k8s.io", "volumesnapshotclasses"): Facts(
        ("vsclass", "vsclasses"), verbs=_CUSTOM
    ),
    ("snapshot.storage.k8s.io", "volumesnapshotcontents"): Facts(("vsc", "vscs"), verbs=_CUSTOM),
    ("snapshot.storage.k8s.io", "volumesnapshots"): Facts(("vs",), verbs=_CUSTOM),
    ("groupsnapshot.storage.k8s.io", "volumegroupsnapshotclasses"): Facts(
        ("vgsclass", "vgsclasses"), verbs=_CUSTOM
    ),
    ("groupsnapshot.storage.k8s.io", "volumegroupsnapshotcontents"): Facts(
        ("vgsc", "vgscs"), verbs=_CUSTOM
    ),
    ("groupsnapshot.storage.k8s.io", "volumegroupsnapshots"): Facts(("vgs",), verbs=_CUSTOM),
}
_STATUS_VERBS = ["get", "patch", "update"]


def facts(kind: Served) -> Facts:
    """A kind's facts; a kind served for a test alone (a made-up CRD) gets a CRD's verbs."""
    return _FACTS.get((kind.group, kind.plural), Facts(verbs=_CUSTOM))


def server_version() -> dict[str, str]:
    """``/version``, as kube-apiserver v1.36.2 answers it (the build fields are that build's)."""
    major, minor, _ = KUBERNETES_VERSION.lstrip("v").split(".")
    return {
        "major": major,
        "minor": minor,
        "emulationMajor": major,
        "emulationMinor": minor,
        "minCompatibilityMajor": major,
        "minCompatibilityMinor": str(int(minor) - 1),
        "gitVersion": KUBERNETES_VERSION,
        "gitCommit": "98b35193b2ac7a23a673325f5e9b830ecd5ba406",
        "gitTreeState": "clean",
        "buildDate": "2026-12-02T03:41:25Z",
        "goVersion": "go1.27.3-X:nojsonv2",
        "compiler": "gc",
        "platform": "linux/amd64",
    }


def group_version(group: str, version: str, kinds: Iterable[Served]) -> dict[str, Any]:
    """The APIResourceList of one group version (core: ``group=""``)."""
    served = sorted(
        (kind for kind in kinds if (kind.group, kind.version) == (group, version)),
        key=lambda kind: kind.plural,
    )
    resources: list[dict[str, Any]] = []
    for kind in served:
        known = facts(kind)
        entry: dict[str, Any] = {
            "name": kind.plural,
            "singularName": kind.kind.lower(),
            "namespaced": kind.namespaced,
            "kind": kind.kind,
            "verbs": list(known.verbs),
        }
        if known.short_names:
            entry["shortNames"] = list(known.short_names)
        if known.categories:
            entry["categories"] = list(known.categories)
        resources.append(entry)
        if kind.status:
            resources.append(
                {
                    "name": f"{kind.plural}/status",
                    "singularName": "",
                    "namespaced": kind.namespaced,
                    "kind": kind.kind,
                    "verbs": _STATUS_VERBS,
                }
            )
    body: dict[str, Any] = {"kind": "APIResourceList"}
    if group:
        body["apiVersion"] = "v1"  # the core list has none
    body.update(groupVersion=f"{group}/{version}" if group else version, resources=resources)
    return body


def core_versions(host: str, port: int | None) -> dict[str, Any]:
    """``/api``: the core group's versions, and the address clients reach the server at."""
    address = f"{host}:{port}" if port else host
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}],
    }
