"""The provisioner interface: what a storage back end plugs into the provisioning controller.

The Python counterpart of sig-storage-lib-external-provisioner v13's `controller` interfaces,
for back ends that are not CSI drivers (an NFS export, a host directory, a vendor's API). The
controller (`operations.Provisioner`) keeps everything else: which claims to provision, the PV
name (`pvc-<claim uid>`), the Normal/Warning events, the retries and their backoff, the PV and
its finalizer, the in-flight journal, the metrics and leader election. The CSI driver is one
implementation of it (`csi_backend.CSIBackend`).

    Go library                               here
    Provisioner.Provision(ctx, opts)         async provision(ProvisionOptions) -> ProvisionResult
      (*PersistentVolume, state, error)        (a volume, or a failure with its state)
    Provisioner.Delete(ctx, pv)              async delete(volume) -> None
    IgnoredError                             raise IgnoredError(reason)
    Qualifier.ShouldProvision(ctx, claim)    should_provision(claim) -> bool      (optional)
    DeletionGuard.ShouldDelete(ctx, pv)      should_delete(volume) -> bool        (optional)
    BlockProvisioner.SupportsBlock(ctx)      supports_block() -> bool             (optional)
    ProvisioningFinished / InBackground /    ProvisioningState.FINISHED / IN_BACKGROUND /
      NoChange / Reschedule                    NO_CHANGE / RESCHEDULE

A failed attempt is a `ProvisionResult` with a state (`ProvisionResult.failed`, ...), or a raised
`ProvisioningError(message, state=...)`: the same to the controller. Anything else a back end
raises is a bug in it: logged with its traceback and retried with the backoff, without an event.
Back ends are registered from a handler module with `register_provisioner` (see the README's
"Writing a provisioner" and `handlers/examples/hostdir_provisioner.py`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from typing import Any, Protocol, runtime_checkable

from kopf_csi.provisioning.errors import IgnoredError, ProvisioningError
from kopf_csi.provisioning.requests import requested_bytes
from kopf_csi.provisioning.states import ProvisioningState

__all__ = [
    "BlockProvisioner",
    "DeletionGuard",
    "IgnoredError",
    "ProvisionOptions",
    "ProvisionResult",
    "ProvisionerBackend",
    "ProvisioningError",
    "ProvisioningState",
    "Qualifier",
    "register_provisioner",
    "registered_provisioners",
]

Body = Mapping[str, Any]
MEMO_KEY = "provisioner_backends"
STARTER_KEY = "provisioner_backend_starter"


@dataclasses.dataclass(frozen=True)
class ProvisionOptions:
    """Everything one attempt needs to know (the library's `ProvisionOptions`)."""

    claim: Body
    """The PersistentVolumeClaim: the PV must satisfy it (size, access modes, volume mode)."""
    storage_class: Body
    """Its StorageClass, whole."""
    volume_name: str
    """The PV's name (`pvc-<claim uid>`): the same on every attempt, so a handy backend id."""
    selected_node: Body | None = None
    """The Node the scheduler picked (WaitForFirstConsumer), from the cache; None if none."""

    @property
    def parameters(self) -> Mapping[str, str]:
        return self.storage_class.get("parameters") or {}

    @property
    def reclaim_policy(self) -> str:
        """`Delete` unless the class says otherwise (the API server's default)."""
        return str(self.storage_class.get("reclaimPolicy") or "Delete")

    @property
    def mount_options(self) -> tuple[str, ...]:
        return tuple(self.storage_class.get("mountOptions") or ())

    @property
    def allowed_topologies(self) -> tuple[Body, ...]:
        return tuple(self.storage_class.get("allowedTopologies") or ())

    @property
    def selected_node_name(self) -> str | None:
        return None if self.selected_node is None else self.selected_node["metadata"]["name"]

    @property
    def requested_bytes(self) -> int:
        """`resources.requests.storage` in bytes (a malformed one fails the attempt, final)."""
        return requested_bytes(self.claim)

    @property
    def block(self) -> bool:
        return (self.claim.get("spec") or {}).get("volumeMode") == "Block"


@dataclasses.dataclass(frozen=True)
class ProvisionResult:
    """What `provision` returns: a volume, or a failure with its state.

    On success, `volume` is the PV as the back end sees it: at least `spec` with the volume
    source (`{"spec": {"nfs": {...}}}`, or `{"spec": {"local": {...}, "nodeAffinity": ...}}`).
    The controller fills in what it leaves out, as the Go library and its users do: the name,
    the claimRef, the class, the provisioned-by annotation, our PV finalizer, and from the
    options the access modes, capacity (the request), volume mode, reclaim policy and mount
    options. Build one with `ProvisionResult.volume_source(...)` or `.persistent_volume(...)`.
    """

    state: ProvisioningState = ProvisioningState.FINISHED
    volume: Body | None = None
    message: str = ""
    """A failure's text: the Warning `ProvisioningFailed` event's message."""
    infeasible: bool = False
    """A failure retrying soon cannot fix (a bad parameter): retried after the maximum delay,
    or at once when the StorageClass is replaced (the CSI InvalidArgument)."""

    @property
    def succeeded(self) -> bool:
        return self.volume is not None

    @classmethod
    def persistent_volume(cls, volume: Body) -> ProvisionResult:
        """Success with a PV (or a part of one: see the class)."""
        return cls(volume=volume)

    @classmethod
    def volume_source(
        cls,
        source: Mapping[str, Any],
        *,
        node_affinity: Mapping[str, Any] | None = None,
        capacity: str | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> ProvisionResult:
        """Success with a volume source, e.g. `{"nfs": {"server": ..., "path": ...}}`."""
        spec: dict[str, Any] = dict(source)
        if node_affinity is not None:
            spec["nodeAffinity"] = dict(node_affinity)
        if capacity is not None:
            spec["capacity"] = {"storage": capacity}
        volume: dict[str, Any] = {"spec": spec}
        if labels:
            volume["metadata"] = {"labels": dict(labels)}
        return cls(volume=volume)

    @classmethod
    def failed(
        cls,
        message: str,
        *,
        state: ProvisioningState = ProvisioningState.FINISHED,
        infeasible: bool = False,
    ) -> ProvisionResult:
        """A failed attempt. `FINISHED` (the default): nothing is left running in the back end;
        `IN_BACKGROUND`: it may still be creating the volume (retried even if the claim goes);
        `NO_CHANGE`: failed before reaching it; `RESCHEDULE`: give the node back."""
        return cls(state=state, message=message, infeasible=infeasible)

    @classmethod
    def in_background(cls, message: str) -> ProvisionResult:
        return cls.failed(message, state=ProvisioningState.IN_BACKGROUND)

    @classmethod
    def reschedule(cls, message: str) -> ProvisionResult:
        """The selected node cannot have it (no room): the scheduler picks again."""
        return cls.failed(message, state=ProvisioningState.RESCHEDULE)

    @classmethod
    def infeasible_request(cls, message: str) -> ProvisionResult:
        return cls.failed(message, infeasible=True)

    def error(self) -> ProvisioningError:
        """A failed result as the controller handles it (the same as a raised one)."""
        if self.volume is not None:
            raise ValueError("a successful result is not an error")
        return ProvisioningError(self.message, state=self.state, infeasible=self.infeasible)


@runtime_checkable
class ProvisionerBackend(Protocol):
    """Creates and deletes the storage behind PVs (the library's `Provisioner`)."""

    async def provision(self, options: ProvisionOptions) -> ProvisionResult:
        """Make the volume for `options.claim`; idempotent: a retry (after a timeout, or a
        restart) comes with the same `volume_name` and must find what it made before."""
        ...

    async def delete(self, volume: Body) -> None:
        """Remove the storage of a Released PV with the Delete policy (never the PV itself).

        Raise `IgnoredError(reason)` for a volume that is not this back end's to delete: it is
        left as it is, without a failure event. Any other exception fails the attempt: a Warning
        `VolumeFailedDelete` with its text, and a retry.
        """
        ...


@runtime_checkable
class Qualifier(Protocol):
    """Optional: `False` leaves a claim alone, as if it were for another provisioner."""

    def should_provision(self, claim: Body) -> bool: ...


@runtime_checkable
class DeletionGuard(Protocol):
    """Optional: `False` keeps a Released PV's storage (it is not deleted, and not retried)."""

    def should_delete(self, volume: Body) -> bool: ...


@runtime_checkable
class BlockProvisioner(Protocol):
    """Optional: without it (or with `False`), Block claims fail at once with the library's
    `<name> does not support block volume provisioning`."""

    def supports_block(self) -> bool: ...


@dataclasses.dataclass(frozen=True)
class Registration:
    """One registered back end: the name it serves and the field manager of its writes."""

    name: str
    provisioner: ProvisionerBackend
    manager: str


def register_provisioner(
    memo: MutableMapping[str, Any],
    *,
    name: str,
    provisioner: ProvisionerBackend,
    manager: str | None = None,
) -> None:
    """Serve the claims of StorageClasses with `provisioner: <name>` with this back end.

    Call it from a handler module's start-up handler, in any order relative to the default
    modules' (`kopf_csi_handlers.provisioner` starts it when it is ready, and at once once it
    runs), or later: a back end registered after start-up lists the claims once, so those that exist
    already are served too.
    `manager` is the field manager of its writes (default: the name, `/` as `-`), as a Go
    provisioner's writes carry its binary's name.
    """
    if not isinstance(provisioner, ProvisionerBackend):
        raise TypeError(f"{provisioner!r} has no async provision(options) and delete(volume)")
    registrations: dict[str, Registration] = memo.setdefault(MEMO_KEY, {})
    if name in registrations:
        raise ValueError(f"a provisioner named {name!r} is registered already")
    registration = Registration(name, provisioner, manager or name.replace("/", "-"))
    registrations[name] = registration
    starter: Callable[[Registration], None] | None = memo.get(STARTER_KEY)
    if starter is not None:
        starter(registration)


def registered_provisioners(memo: Mapping[str, Any]) -> Sequence[Registration]:
    """The back ends registered so far, in order."""
    return tuple((memo.get(MEMO_KEY) or {}).values())
