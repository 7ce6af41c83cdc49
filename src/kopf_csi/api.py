"""The public API for handler modules: everything a module may use, in one import.

    from kopf_csi import api

A handler module is a kopf module (`import kopf`) that uses this and nothing else of kopf-csi.
Every other module of `kopf_csi` is internal: it may change in any release, and the import
contract (`pyproject.toml`, `api-only`) keeps the examples and the README to this one.
docs/modules.md is the guide; its reference part is generated from the docstrings here
(`python -m devtools.apiref --write`).

What is here:

- The Kubernetes client: `KubeClient` (`memo.api` in a kopf handler, `context.api` in a
  CreateVolume hook), a `Resource` for every kind a storage module touches (`CLAIMS`,
  `VOLUMES`, `NAMESPACES`, `CONFIGMAPS`, `SNAPSHOTS`, ...), its errors, and the guarded write
  (`guarded_patch`, `retry_on_conflict`).
- Events under your own name: `Recorder`, `NORMAL`, `WARNING`.
- Quantities as Kubernetes writes them: `quantity_bytes`, `format_binary_si`, `QuantityError`.
- CreateVolume hooks: `create_volume_hooks`, `Refused`, `HookContext` (with `reserve` for
  quotas under concurrency), `OverBudget`, `CreateVolumeRequest`.
- Provisioner back ends without a CSI driver: `register_provisioner`, `ProvisionerBackend`,
  `ProvisionOptions`, `ProvisionResult`, `IgnoredError`, `ProvisioningState`.
- The claim and PV streams' decorators: `on` (`@api.on.volume_provisioned()`, ...).
- Settings: `settings_from_memo`, `Settings`, `ProvisionerOptions`.
- The RBAC a module needs, declared next to its code: `rbac` (`api.rbac.declare(
  api.rbac.cluster(api.NAMESPACES, "list", "watch", why=...))`; `kopf-csi rbac -m MODULE`
  prints it as YAML).
"""

from __future__ import annotations

from kopf_csi import on, rbac
from kopf_csi.csi.messages import CreateVolumeRequest
from kopf_csi.events import NORMAL, WARNING, Recorder
from kopf_csi.kube import (
    CLAIMS,
    CONFIGMAPS,
    CSIDRIVERS,
    CSINODES,
    EVENTS,
    NODES,
    SECRETS,
    SNAPSHOT_CLASSES,
    SNAPSHOT_CONTENTS,
    SNAPSHOTS,
    STORAGE_CLASSES,
    VOLUME_ATTACHMENTS,
    VOLUMES,
    ConflictError,
    KubeClient,
    KubeError,
    NotFoundError,
    Resource,
    StaleWriteError,
    UnavailableError,
    guarded_patch,
    retry_on_conflict,
)
from kopf_csi.provisioning.backends import (
    IgnoredError,
    ProvisionerBackend,
    ProvisionOptions,
    ProvisionResult,
    register_provisioner,
)
from kopf_csi.provisioning.hookcontext import ContextHook, HookContext, OverBudget
from kopf_csi.provisioning.hooks import CreateVolumeHook, Refused, create_volume_hooks
from kopf_csi.provisioning.quantities import QuantityError, format_binary_si, quantity_bytes
from kopf_csi.provisioning.states import ProvisioningState
from kopf_csi.runtime import settings_from_memo
from kopf_csi.settings import ProvisionerOptions, Settings

__all__ = [
    "CLAIMS",
    "CONFIGMAPS",
    "CSIDRIVERS",
    "CSINODES",
    "EVENTS",
    "NAMESPACES",
    "NODES",
    "NORMAL",
    "PODS",
    "SECRETS",
    "SNAPSHOTS",
    "SNAPSHOT_CLASSES",
    "SNAPSHOT_CONTENTS",
    "STORAGE_CLASSES",
    "VOLUMES",
    "VOLUME_ATTACHMENTS",
    "WARNING",
    "ConflictError",
    "ContextHook",
    "CreateVolumeHook",
    "CreateVolumeRequest",
    "HookContext",
    "IgnoredError",
    "KubeClient",
    "KubeError",
    "NotFoundError",
    "OverBudget",
    "ProvisionOptions",
    "ProvisionResult",
    "ProvisionerBackend",
    "ProvisionerOptions",
    "ProvisioningState",
    "QuantityError",
    "Recorder",
    "Refused",
    "Resource",
    "Settings",
    "StaleWriteError",
    "UnavailableError",
    "create_volume_hooks",
    "format_binary_si",
    "guarded_patch",
    "on",
    "quantity_bytes",
    "rbac",
    "register_provisioner",
    "retry_on_conflict",
    "settings_from_memo",
]

NAMESPACES = Resource("", "v1", "namespaces", namespaced=False)
"""Namespaces (cluster-scoped): `await memo.api.get(api.NAMESPACES, "team-a")`."""

PODS = Resource("", "v1", "pods", namespaced=True)
"""Pods."""
