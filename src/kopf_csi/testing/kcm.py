"""A stand-in for what kube-controller-manager (and a sliver of the scheduler) do around us.

Scaffolding for tests and the sandbox, not part of the operator: an operator that replaces the
CSI sidecars only works if something sets the provisioner annotations, binds claims to the
volumes it creates, releases volumes, and creates/deletes VolumeAttachments. In a real cluster
that is KCM; on an ``EmulatedCluster`` it is this module.

What it mirrors, from kubernetes/kubernetes (read, not copied; see sidecars.md §1.1, §1.2):

- PV controller (pkg/controller/volume/persistentvolume/pv_controller.go): ``syncClaim``
  dispatches on the ``bind-completed`` annotation; ``syncUnboundClaim`` binds a pre-bound
  volume, assigns the default class, waits for ``selected-node`` on WaitForFirstConsumer
  classes (events ``WaitForFirstConsumer``/``WaitForPodScheduled``), else sets both
  storage-provisioner annotations and emits ``ExternalProvisioning``; ``bind`` writes the PV
  claimRef, PV phase, claim volumeName and annotations, claim status, in that order;
  ``syncBoundClaim`` marks claims ``Lost``; ``syncVolume`` sets Available/Bound/Released, and
  at every sync of a released volume with the Delete policy ``reclaimVolume`` starts
  ``deleteVolumeOperation``, which for an external provisioner only reads the volume afresh.
- Attach/detach controller with the CSI plugin (pkg/volume/csi/csi_attacher.go
  ``getAttachmentName``, csi_plugin.go ``skipAttach``): one VolumeAttachment per (CSI volume,
  node) in use by a scheduled pod unless the CSIDriver says ``attachRequired: false``
  (a missing CSIDriver means attach is required); deleted once no pod needs it.
- Scheduler (volume binding): a pod with ``spec.nodeName`` and an unbound WaitForFirstConsumer
  claim gets ``volume.kubernetes.io/selected-node`` set on the claim. A node given back (the
  provisioner's reschedule removes the annotation) is a failed scheduling attempt: the pod is
  tried again after kube-scheduler's back-off, 1 s doubling up to 10 s per pod
  (``podInitialBackoffSeconds``, ``podMaxBackoffSeconds``), not at once.

- The pvc-protection and pv-protection controllers (pkg/controller/volume/pvcprotection,
  pvprotection): the finalizers the API server's StorageObjectInUseProtection admission puts
  on every new claim and volume are removed, with an update (PUT) guarded by the
  resourceVersion, once the object is being deleted and is not in use: a claim no active Pod
  names, a volume that is not Bound. On a real server these writes land within milliseconds
  of the deletion, and race the external provisioner's own writes on the same PV.

Every write carries the field manager ``kube-controller-manager``, and every change to an
existing object is an update (PUT, of ``/status`` for phases) of the cached copy, guarded by its
resourceVersion, as client-go's ``Update``/``UpdateStatus`` in KCM: the verbs and their order
per volume are the real server's (docs/benchmarks.md, "Watch traffic per volume").

Left out: static binding of claim-less PVs to claims by class/size/modes, in-tree
provisioning/deletion/recycling, CSI migration, multi-attach checks, waiting for kubelet to
unmount before detaching, and node annotations (``controller-managed-attach-detach``).

How it runs (an atomic pass per batch of changes, or, with a latency model, KCM's workers side
by side, each write waiting its time) is its base class's, `kcmrunning.ControllerRunner`; how
its events are posted, once and again at a resync, is `kcmevents`'s. Here: what each controller
decides and writes, and what a change queues for which controller (`_observe`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import hashlib
from collections.abc import Iterator

from kopf_csi.testing.emulator import Body, Change, EmulatedCluster
from kopf_csi.testing.kcmevents import EventRecorder
from kopf_csi.testing.kcmrunning import PVCS, PVS, ControllerRunner
from kopf_csi.testing.latency import ObjectPath

__all__ = ["ControllerManager", "attachment_name"]

ANN_STORAGE_PROVISIONER = "volume.kubernetes.io/storage-provisioner"
ANN_BETA_STORAGE_PROVISIONER = "volume.beta.kubernetes.io/storage-provisioner"
ANN_SELECTED_NODE = "volume.kubernetes.io/selected-node"
ANN_BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
ANN_BOUND_BY_CONTROLLER = "pv.kubernetes.io/bound-by-controller"
ANN_PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"
ANN_DEFAULT_CLASS = "storageclass.kubernetes.io/is-default-class"
FINALIZER_PVC_PROTECTION = "kubernetes.io/pvc-protection"
FINALIZER_PV_PROTECTION = "kubernetes.io/pv-protection"
PV_CONTROLLER = "persistentvolume-controller"
VAS = "volumeattachments"

_EXTERNAL_PROVISIONING = (
    "Waiting for a volume to be created either by the external provisioner '{}' or manually by "
    "the system administrator. If volume creation is delayed, please verify that the "
    "provisioner is running and correctly registered."
)  # pv_controller.go provisionClaimOperationExternal, verbatim


SCHEDULER_BACKOFF = (1.0, 10.0)
"""kube-scheduler's back-off for a pod whose attempt failed, initial and maximum seconds
(its configuration's ``podInitialBackoffSeconds``, ``podMaxBackoffSeconds`` defaults)."""


def scheduler_backoff(failures: int, backoff: tuple[float, float] = SCHEDULER_BACKOFF) -> float:
    """Seconds before a pod's next attempt after `failures` failed ones: the initial back-off,
    doubled for each failure after the first, at most the maximum (the scheduling queue's
    ``calculateBackoffDuration``)."""
    initial, maximum = backoff
    return min(initial * 2.0 ** max(failures - 1, 0), maximum)


@dataclasses.dataclass
class _Attempts:
    """The scheduler's attempts for one pod: the claims it selected a node for last, how many
    attempts failed (a node given back), and when it may try again (None: not waiting)."""

    selected: set[tuple[str, str]] = dataclasses.field(default_factory=set)
    failures: int = 0
    retry_at: float | None = None


def attachment_name(volume_handle: str, driver: str, node: str) -> str:
    """``csi-<sha256(volumeHandle + driver + nodeName)>``, as csi_attacher.go names a VA."""
    return "csi-" + hashlib.sha256(f"{volume_handle}{driver}{node}".encode()).hexdigest()


def _meta(obj: Body) -> Body:
    return obj.get("metadata") or {}


def _key(obj: Body) -> tuple[str, str]:
    meta = _meta(obj)
    return (meta.get("namespace") or "", meta.get("name") or "")


def _annotations(obj: Body) -> dict[str, str]:
    return _meta(obj).get("annotations") or {}


def _spec(obj: Body) -> Body:
    return obj.get("spec") or {}


def _phase(obj: Body) -> str | None:
    return (obj.get("status") or {}).get("phase")


def _pod_claims(pod: Body) -> Iterator[str]:
    for volume in _spec(pod).get("volumes") or []:
        claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
        if claim:
            yield claim


def _refers_to(volume: Body, claim: Body) -> bool:
    """The volume's claimRef names this claim, with its uid or none (pre-bound by a user)."""
    ref, meta = _spec(volume).get("claimRef") or {}, _meta(claim)
    same_name = (ref.get("namespace"), ref.get("name")) == (meta.get("namespace"), meta["name"])
    return same_name and ref.get("uid") in (None, "", meta["uid"])


def _pod_active(pod: Body) -> bool:
    return _phase(pod) not in ("Succeeded", "Failed")


def _uses(pods: list[Body], claim: Body) -> bool:
    """An active pod among `pods` names the claim."""
    name = _meta(claim)["name"]
    return any(name in _pod_claims(pod) and _pod_active(pod) for pod in pods)


class ControllerManager(ControllerRunner):
    """``async with ControllerManager(cluster): ...`` runs the stand-in as a background task."""

    watched = (
        "persistentvolumeclaims",
        "persistentvolumes",
        "storageclasses",
        "pods",
        "csidrivers",
        "volumeattachments",
    )
    task_name = "kcm-stand-in"
    manager = "kube-controller-manager"

    def __init__(
        self,
        cluster: EmulatedCluster,
        *,
        volumes: bool = True,  # the PV controller (binding, provisioning requests, release)
        attachments: bool = True,  # the attach/detach controller (VolumeAttachments)
        scheduler: bool = True,  # selected-node for WaitForFirstConsumer claims
        protection: bool = True,  # the pvc-protection and pv-protection controllers
        resync_period: float | None = 15.0,  # every claim and volume synced again (None: never)
        yield_every: int | None = None,  # objects per turn of the loop (None: a pass at once)
        kube_api_qps: float | None = None,  # each controller's client's limit (None: none)
        kube_api_burst: int = 30,  # (KCM's flags, 20 and 30 by default; with a model only)
        scheduler_backoff: tuple[float, float] = SCHEDULER_BACKOFF,  # a node given back
    ) -> None:
        enabled = {
            "volumes": volumes, "attachments": attachments, "scheduler": scheduler,
            "protection": protection,
        }  # fmt: skip
        super().__init__(
            cluster,
            enabled=enabled,
            resync_period=resync_period,
            yield_every=yield_every,
            kube_api_qps=kube_api_qps,
            kube_api_burst=kube_api_burst,
        )
        self._events = EventRecorder(
            cluster,
            manager=self.manager,
            component=PV_CONTROLLER,
            send=self._send,
            resyncing=self._resyncing,
        )
        self.scheduler_backoff = scheduler_backoff
        self._attempts: dict[tuple[str, str], _Attempts] = {}  # the scheduler's, by pod
        self._attachments: set[str] = set()  # VA names this attach/detach controller created
        # claim key -> the volumes whose claimRef names it (in the order they did)
        self._claimed: dict[tuple[str, str], dict[tuple[str, str], None]] = {}

    # --- What a change queues (the controllers' informer handlers) -------------------------

    def _observe(self, change: Change) -> None:
        """Cache the change, and queue what it touches for the next pass."""
        before = self._cache[change.kind.plural].get(_key(change.object))
        super()._observe(change)
        plural = change.kind.plural
        for obj in (before, change.object):
            if obj is None:
                continue
            if plural == "persistentvolumeclaims":
                self._dirty_claims[_key(obj)] = None
                if volume_name := _spec(obj).get("volumeName"):
                    self._dirty_volumes[("", volume_name)] = None
                self._dirty_volumes.update(self._claimed.get(_key(obj), {}))
            elif plural == "persistentvolumes":
                self._dirty_volumes[_key(obj)] = None
                if ref := _spec(obj).get("claimRef"):
                    self._dirty_claims[(ref.get("namespace") or "", ref.get("name") or "")] = None
            elif plural == "pods":
                namespace = _meta(obj).get("namespace") or ""
                self._dirty_claims.update(dict.fromkeys((namespace, n) for n in _pod_claims(obj)))
            elif plural in ("storageclasses", "csidrivers"):
                self._everything = True
        if plural == "persistentvolumes":
            self._index_claim_ref(before, change.object if change.type != "DELETED" else None)

    def _index_claim_ref(self, before: Body | None, after: Body | None) -> None:
        for obj, present in ((before, False), (after, True)):
            ref = _spec(obj).get("claimRef") if obj is not None else None
            if obj is None or not ref:
                continue
            claim_key = (ref.get("namespace") or "", ref.get("name") or "")
            volumes = self._claimed.setdefault(claim_key, {})
            if present:
                volumes[_key(obj)] = None
            else:
                volumes.pop(_key(obj), None)
            if not volumes:
                del self._claimed[claim_key]

    def _put(self, plural: str, obj: Body) -> Body:
        if plural == "persistentvolumes":  # our own write, cached at once: indexed at once
            self._index_claim_ref(self._cache[plural].get(_key(obj)), obj)
        return super()._put(plural, obj)

    def _claimed_volume(self, claim_key: tuple[str, str]) -> Body | None:
        """The volume whose claimRef names the claim (the latest to, if several do)."""
        for volume_key in reversed(self._claimed.get(claim_key, {})):
            if (volume := self._cache["persistentvolumes"].get(volume_key)) is not None:
                return volume
        return None

    # --- Helpers -------------------------------------------------------------------------

    def _claim(self, namespace: str, name: str) -> Body | None:
        return self._cache["persistentvolumeclaims"].get((namespace, name))

    def _volume(self, name: str) -> Body | None:
        return self._cache["persistentvolumes"].get(("", name))

    def _class(self, claim: Body) -> Body | None:
        return self._cache["storageclasses"].get(("", _spec(claim).get("storageClassName") or ""))

    def _delays_binding(self, claim: Body) -> bool:
        storage_class = self._class(claim)
        return (
            storage_class is not None
            and storage_class.get("volumeBindingMode") == "WaitForFirstConsumer"
        )

    # --- Scheduler: selected-node --------------------------------------------------------

    async def _sync_scheduler(self) -> None:
        pods = self._cache["pods"]
        for gone in [key for key in self._attempts if key not in pods]:
            del self._attempts[gone]
        for pod_key, pod in list(pods.items()):
            node = _spec(pod).get("nodeName")
            if not node or not _pod_active(pod):
                continue
            unselected = [
                claim
                for claim_name in _pod_claims(pod)
                if (claim := self._claim(pod_key[0], claim_name)) is not None
                and not _spec(claim).get("volumeName")
                and self._delays_binding(claim)
                and ANN_SELECTED_NODE not in _annotations(claim)
            ]
            if unselected and self._may_try(pod_key, {_key(claim) for claim in unselected}):
                for claim in unselected:
                    changes = {"metadata": {"annotations": {ANN_SELECTED_NODE: node}}}
                    await self._timed_update("persistentvolumeclaims", claim, changes)

    def _may_try(self, pod: tuple[str, str], unselected: set[tuple[str, str]]) -> bool:
        """Whether the scheduler selects nodes for the pod's `unselected` claims now. A claim
        it selected a node for last time is unselected again: that attempt failed (the
        provisioner gave the node back), and the pod waits out its back-off first."""
        attempts = self._attempts.setdefault(pod, _Attempts())
        now = asyncio.get_running_loop().time()
        if attempts.retry_at is None and attempts.selected & unselected:
            attempts.failures += 1
            attempts.retry_at = now + scheduler_backoff(attempts.failures, self.scheduler_backoff)
            self._wake_at(attempts.retry_at)
        if attempts.retry_at is not None and now < attempts.retry_at:
            return False
        attempts.selected, attempts.retry_at = unselected, None
        return True

    # --- PV controller -------------------------------------------------------------------

    async def _sync_claim(self, claim: Body) -> None:
        if _meta(claim).get("deletionTimestamp"):
            return
        if ANN_BIND_COMPLETED in _annotations(claim):
            await self._sync_bound_claim(claim)
        elif _spec(claim).get("volumeName"):
            await self._sync_claim_for_named_volume(claim)
        else:
            await self._sync_unbound_claim(claim)

    async def _sync_unbound_claim(self, claim: Body) -> None:
        volume = self._prebound_volume(claim)
        if volume is not None:
            await self._bind(volume, claim)
            return
        if _spec(claim).get("storageClassName") is None and await self._assign_default_class(claim):
            return
        if not _spec(claim).get("storageClassName"):
            message = "no persistent volumes available for this claim and no storage class is set"
            self._events.record(claim, "Normal", "FailedBinding", message)
            return
        if self._delays_binding(claim) and ANN_SELECTED_NODE not in _annotations(claim):
            self._emit_waiting_for_consumer(claim)
            return
        storage_class = self._class(claim)
        if storage_class is None:
            message = f'storageclass.storage.k8s.io "{_spec(claim)["storageClassName"]}" not found'
            self._events.record(claim, "Warning", "ProvisioningFailed", message)
            return
        provisioner = storage_class.get("provisioner", "")
        if provisioner.startswith("kubernetes.io/"):
            return  # in-tree plugins and kubernetes.io/no-provisioner: not ours to emulate
        # provisionClaim: an operation of its own (scheduleOperation, a goroutine per claim)
        operation = functools.partial(self._provision_externally, claim, provisioner)
        await self._operation(f"provision-{_meta(claim)['uid']}", PVCS, _key(claim), operation)

    async def _provision_externally(self, claim: Body, provisioner: str) -> None:
        """provisionClaimOperationExternal: both annotations, then the event."""
        wanted = {ANN_STORAGE_PROVISIONER: provisioner, ANN_BETA_STORAGE_PROVISIONER: provisioner}
        if any(_annotations(claim).get(key) != value for key, value in wanted.items()):
            claim = await self._timed_update(
                "persistentvolumeclaims", claim, {"metadata": {"annotations": wanted}}
            )
        self._events.record(
            claim, "Normal", "ExternalProvisioning", _EXTERNAL_PROVISIONING.format(provisioner)
        )

    def _prebound_volume(self, claim: Body) -> Body | None:
        meta = _meta(claim)
        volume = self._claimed_volume((meta.get("namespace") or "", meta["name"]))
        return volume if volume is not None and _refers_to(volume, claim) else None

    async def _assign_default_class(self, claim: Body) -> bool:
        for storage_class in self._cache["storageclasses"].values():
            if _annotations(storage_class).get(ANN_DEFAULT_CLASS) == "true":
                name = storage_class["metadata"]["name"]
                await self._timed_update(
                    "persistentvolumeclaims", claim, {"spec": {"storageClassName": name}}
                )
                return True
        return False

    def _emit_waiting_for_consumer(self, claim: Body) -> None:
        meta = _meta(claim)
        pods = [
            pod["metadata"]["name"]
            for (namespace, _), pod in self._cache["pods"].items()
            if namespace == meta.get("namespace")
            and meta["name"] in _pod_claims(pod)
            and _pod_active(pod)
            and not _spec(pod).get("nodeName")
        ]
        if not pods:
            reason, message = (
                "WaitForFirstConsumer",
                "waiting for first consumer to be created before binding",
            )
        elif len(pods) == 1:
            reason, message = "WaitForPodScheduled", f"waiting for pod {pods[0]} to be scheduled"
        else:
            reason, message = (
                "WaitForPodScheduled",
                f"waiting for pods {','.join(pods)} to be scheduled",
            )
        self._events.record(claim, "Normal", reason, message)

    async def _sync_claim_for_named_volume(self, claim: Body) -> None:
        volume = self._volume(_spec(claim)["volumeName"])
        if volume is None:
            return  # the user asked for a volume that does not exist (yet): stay Pending
        if not _spec(volume).get("claimRef") or _refers_to(volume, claim):
            await self._bind(volume, claim)
        else:
            message = f'volume "{volume["metadata"]["name"]}" already bound to a different claim.'
            self._events.record(claim, "Warning", "FailedBinding", message)

    async def _sync_bound_claim(self, claim: Body) -> None:
        volume_name = _spec(claim).get("volumeName")
        volume = self._volume(volume_name) if volume_name else None
        ref = _spec(volume).get("claimRef") if volume is not None else None
        if not volume_name:
            message = (
                "Bound claim has lost reference to PersistentVolume. Data on the volume is lost!"
            )
            await self._lose(claim, "ClaimLost", message)
        elif volume is None:
            await self._lose(
                claim,
                "ClaimLost",
                "Bound claim has lost its PersistentVolume. Data on the volume is lost!",
            )
        elif ref is None or ref.get("uid") == _meta(claim)["uid"]:
            await self._bind(volume, claim)
        else:
            message = "Two claims are bound to the same volume, this one is bound incorrectly"
            await self._lose(claim, "ClaimMisbound", message)

    async def _lose(self, claim: Body, reason: str, message: str) -> None:
        if _phase(claim) != "Lost":
            await self._timed_update(
                "persistentvolumeclaims", claim, {"status": {"phase": "Lost"}}, status=True
            )
            self._events.record(claim, "Warning", reason, message)

    async def _bind(self, volume: Body, claim: Body) -> None:
        """Volume claimRef, volume phase, claim volumeName and annotations, claim status."""
        meta = _meta(claim)
        ref = _spec(volume).get("claimRef")
        bound_to_claim = _refers_to(volume, claim)  # else bound here by the controller
        if (ref or {}).get("uid") != meta["uid"]:
            claim_ref = {"kind": "PersistentVolumeClaim", "apiVersion": "v1", "name": meta["name"]}
            claim_ref.update(
                namespace=meta["namespace"],
                uid=meta["uid"],
                resourceVersion=meta["resourceVersion"],
            )
            changes: Body = {"spec": {"claimRef": claim_ref}}
            if not bound_to_claim:
                changes["metadata"] = {"annotations": {ANN_BOUND_BY_CONTROLLER: "yes"}}
            volume = await self._timed_update("persistentvolumes", volume, changes)
        if _phase(volume) != "Bound":
            volume = await self._timed_update(
                "persistentvolumes", volume, {"status": {"phase": "Bound"}}, status=True
            )
        volume_name = volume["metadata"]["name"]
        claim_changes: Body = {}
        annotations: dict[str, str] = {}
        if _spec(claim).get("volumeName") != volume_name:
            claim_changes["spec"] = {"volumeName": volume_name}
            if ANN_BOUND_BY_CONTROLLER not in _annotations(claim):
                annotations[ANN_BOUND_BY_CONTROLLER] = "yes"
        if ANN_BIND_COMPLETED not in _annotations(claim):
            annotations[ANN_BIND_COMPLETED] = "yes"
        if annotations:
            claim_changes["metadata"] = {"annotations": annotations}
        if claim_changes:
            claim = await self._timed_update("persistentvolumeclaims", claim, claim_changes)
        status: Body = {}
        if (claim.get("status") or {}).get("accessModes") != _spec(volume).get("accessModes"):
            status["accessModes"] = _spec(volume).get("accessModes")
        if _phase(claim) != "Bound":
            # The capacity is copied only when the claim becomes Bound (a later difference
            # can mean a pending filesystem resize).
            status.update(phase="Bound", capacity=_spec(volume).get("capacity"))
        if status:
            await self._timed_update(
                "persistentvolumeclaims", claim, {"status": status}, status=True
            )

    async def _sync_volume(self, volume: Body) -> None:
        ref = _spec(volume).get("claimRef")
        if not ref or not ref.get("uid"):
            phase = "Available"  # unused, or pre-bound to a claim the claim sync will bind
        else:
            claim = self._claim(ref.get("namespace") or "", ref.get("name") or "")
            if claim is None or claim["metadata"]["uid"] != ref["uid"]:
                if _phase(volume) not in ("Released", "Failed"):
                    # syncVolume asks the API server before it releases the volume
                    path = ObjectPath(PVCS, ref.get("namespace"), ref.get("name"))
                    async with self._wait(path, "GET"):
                        pass
                    volume = await self._release(volume)
                await self._reclaim(volume)  # at every sync of a released volume
                return
            elif not _spec(claim).get("volumeName"):
                return  # the claim sync finishes the binding
            elif _spec(claim)["volumeName"] == volume["metadata"]["name"]:
                phase = "Bound"
            elif ANN_PROVISIONED_BY in _annotations(volume) and (
                _spec(volume).get("persistentVolumeReclaimPolicy") == "Delete"
            ):
                # provisioned for a claim that got bound elsewhere
                if _phase(volume) not in ("Released", "Failed"):
                    volume = await self._release(volume)
                await self._reclaim(volume)
                return
            else:
                await self._unbind(volume)
                return
        if _phase(volume) != phase:
            await self._timed_update(
                "persistentvolumes", volume, {"status": {"phase": phase}}, status=True
            )

    async def _release(self, volume: Body) -> Body:
        return await self._timed_update(
            "persistentvolumes", volume, {"status": {"phase": "Released"}}, status=True
        )

    async def _reclaim(self, volume: Body) -> None:
        """reclaimVolume, for the Delete policy (Retain: nothing; Recycle, in-tree: left
        out): ``deleteVolumeOperation`` as an operation of its own, one at a time per volume.
        It reads the volume afresh (a GET); the deletion is the external provisioner's, so
        that read is all it sends. Every sync of a released volume starts one (unless one
        runs): each change to the volume while it is deleted costs the PV controller's client
        a request."""
        meta = _meta(volume)
        if _spec(volume).get("persistentVolumeReclaimPolicy") != "Delete":
            return
        name = meta["name"]

        async def read_afresh() -> None:
            async with self._wait(ObjectPath(PVS, None, name), "GET"):
                pass

        await self._operation(f"delete-{name}[{meta['uid']}]", PVS, ("", name), read_afresh)

    async def _unbind(self, volume: Body) -> None:
        if ANN_BOUND_BY_CONTROLLER in _annotations(volume):
            changes: Body = {
                "spec": {"claimRef": None},
                "metadata": {"annotations": {ANN_BOUND_BY_CONTROLLER: None}},
            }
        else:
            changes = {"spec": {"claimRef": {"uid": None}}}  # pre-bound by the user: keep the ref
        volume = await self._timed_update("persistentvolumes", volume, changes)
        await self._timed_update(
            "persistentvolumes", volume, {"status": {"phase": "Available"}}, status=True
        )

    # --- pvc-protection and pv-protection controllers --------------------------------------

    async def _sync_claim_protection(self, claim: Body) -> None:
        """isBeingUsed: the informer's pods first; if none uses the claim, with a latency
        model, a live LIST of the namespace's pods too (once per batch: `_live_pods`), as a
        pod may not be in the informer yet. Without a model the pass is atomic: the cache is
        the cluster."""
        meta = _meta(claim)
        if not meta.get("deletionTimestamp") or FINALIZER_PVC_PROTECTION not in (
            meta.get("finalizers") or []
        ):
            return
        namespace = meta.get("namespace") or ""
        cached = [pod for (ns, _), pod in self._cache["pods"].items() if ns == namespace]
        if _uses(cached, claim):
            return
        if self.timed and _uses(await self._live_pods(namespace), claim):
            return
        await self._unprotect("persistentvolumeclaims", claim, FINALIZER_PVC_PROTECTION)

    async def _sync_volume_protection(self, volume: Body) -> None:
        if _meta(volume).get("deletionTimestamp") and _phase(volume) != "Bound":
            await self._unprotect("persistentvolumes", volume, FINALIZER_PV_PROTECTION)

    async def _unprotect(self, plural: str, obj: Body, finalizer: str) -> None:
        """Remove `finalizer` with an update carrying our resourceVersion (a 409 if stale)."""
        meta = _meta(obj)
        finalizers = list(meta.get("finalizers") or [])
        if finalizer not in finalizers:
            return
        body = {
            **obj,
            "metadata": {**meta, "finalizers": [f for f in finalizers if f != finalizer]},
        }
        async with self._wait(ObjectPath(plural, meta.get("namespace"), meta["name"]), "PUT"):
            updated = self.cluster.replace(
                plural, meta.get("namespace"), meta["name"], body, manager=self.manager
            )
        if updated["metadata"].get("finalizers"):  # else it is gone: the feed says so
            self._put(plural, updated)

    # --- Attach/detach controller --------------------------------------------------------

    async def _sync_attachments(self) -> None:
        desired = dict(self._desired_attachments())
        existing = self._cache["volumeattachments"]
        for name, spec in desired.items():
            if ("", name) not in existing:
                body = {"metadata": {"name": name}, "spec": spec}
                await self._operation(
                    f"attach-{name}", VAS, ("", name), functools.partial(self._attach, body)
                )
            self._attachments.add(name)
        for name in sorted(self._attachments - desired.keys()):
            attachment = existing.get(("", name))
            if attachment is None:
                # Gone, or its POST still on its way. KCM's attach operation ends by putting
                # the volume in the actual state of the world (attached, or uncertain if it
                # failed), and the reconciler detaches it once no operation is pending: an
                # attach that lands after its pod went is detached then, never forgotten.
                if f"attach-{name}" not in self.operations:
                    self._attachments.discard(name)
            elif not _meta(attachment).get("deletionTimestamp"):
                detach = functools.partial(self._detach, name)
                await self._operation(f"detach-{name}", VAS, ("", name), detach)

    async def _attach(self, body: Body) -> None:
        async with self._wait(ObjectPath(VAS, None, None), "POST"):
            self._create(VAS, body)

    async def _detach(self, name: str) -> None:
        async with self._wait(ObjectPath(VAS, None, name), "DELETE"):
            gone = self.cluster.delete(VAS, None, name, manager=self.manager)
        if _meta(gone).get("finalizers"):  # else the feed takes it out of the cache
            self._put(VAS, gone)

    def _desired_attachments(self) -> Iterator[tuple[str, Body]]:
        drivers = self._cache["csidrivers"]
        for (namespace, _), pod in self._cache["pods"].items():
            node = _spec(pod).get("nodeName")
            if not node or not _pod_active(pod):
                continue
            for claim_name in _pod_claims(pod):
                claim = self._claim(namespace, claim_name)
                volume_name = _spec(claim).get("volumeName") if claim is not None else None
                volume = self._volume(volume_name) if volume_name else None
                csi = _spec(volume).get("csi") if volume is not None else None
                if not csi or not volume_name:
                    continue
                driver = drivers.get(("", csi["driver"]))
                if driver is not None and _spec(driver).get("attachRequired") is False:
                    continue  # csi_plugin.go skipAttach; a missing CSIDriver means "attach"
                spec = {
                    "attacher": csi["driver"],
                    "nodeName": node,
                    "source": {"persistentVolumeName": volume_name},
                }
                yield attachment_name(csi["volumeHandle"], csi["driver"], node), spec
