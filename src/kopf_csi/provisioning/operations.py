"""The provisioner's two operations: provision a claim, delete a released volume.

Async orchestration only: each step is a guard clause that reads (caches first, the API where
the Go code reads the API), calls a pure builder from this package, calls the driver, writes.
It is the port of the library's `provisionClaimOperation` / `deleteVolumeOperation` with
external-provisioner's `Provision` / `Delete`. No kopf here: each returns a
`queueing.Outcome` for the work queue to act on.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Mapping
from typing import Any

import structlog

from kopf_csi import events, kube, names
from kopf_csi.caches import Caches
from kopf_csi.csi import CSIClient, CSIError, DriverInfo
from kopf_csi.csi import messages as csi
from kopf_csi.provisioning import (
    decisions,
    deletions,
    naming,
    ownership,
    protection,
    requests,
    secrets,
    sources,
    topology,
)
from kopf_csi.provisioning.errors import IgnoredError, ProvisioningError
from kopf_csi.provisioning.journal import Journal, JournalError
from kopf_csi.provisioning.options import ProvisionerOptions
from kopf_csi.provisioning.states import (
    ProvisioningState,
    SlowRetry,
    error_text,
    failure_outcome,
    slow_retry_delay,
    state_for,
)
from kopf_csi.provisioning.volumes import build_volume, response_problem
from kopf_csi.queueing import DONE, RETRY, Outcome, retry_after

__all__ = ["Provisioner"]

log = structlog.get_logger("kopf_csi.provisioning")
Body = Mapping[str, Any]


class Provisioner:
    """The provisioner's state and its operations on claims and volumes."""

    def __init__(
        self,
        *,
        csi_client: CSIClient,
        api: kube.KubeClient,
        recorder: events.Recorder,
        caches: Caches,
        driver: DriverInfo,
        options: ProvisionerOptions,
        identity: str,
        journal: Journal | None = None,
    ) -> None:
        self.csi = csi_client
        self.api = api
        self.recorder = recorder
        self.caches = caches
        self.driver = driver
        self.options = options
        self.identity = identity
        self.journal = journal
        self.supports_topology = topology.supports_topology(driver.plugin_capabilities)
        self.in_progress: dict[str, Body] = {}
        """Claims whose CreateVolume may still run on the driver (claimsInProgress)."""
        self.slow_retries: dict[str, SlowRetry] = {}
        self.topology_memos: dict[str, topology.TopologyMemo] = {}
        self.competing: dict[str, tuple[int, float | None]] = {}
        """Node deployment: Immediate claims we wait to claim (attempts, when to try)."""

    # -- claims --------------------------------------------------------------------------------

    async def sync_claim(self, key: str) -> Outcome:
        claim = self.caches.claims.get(key)
        remembered = self.in_progress.get(key)
        if claim is None or (
            remembered is not None and _uid(remembered) != _uid(claim) and claim is not None
        ):
            # Deleted (or replaced): only a CreateVolume that may still run needs finishing.
            if remembered is None:
                return DONE
            claim = remembered
        bound = structlog.contextvars.bound_contextvars(
            kind="PersistentVolumeClaim", namespace=_meta(claim).get("namespace"),
            name=_meta(claim).get("name"), uid=_uid(claim),
        )  # fmt: skip
        with bound:
            return await self._sync_claim(key, claim)

    async def _sync_claim(self, key: str, claim: Body) -> Outcome:
        storage_class = self.caches.storage_classes.get(naming.claim_class_name(claim))
        volume_name = self._volume_name(claim)
        try:
            decision = decisions.should_provision(
                claim,
                storage_class,
                driver_name=self.driver.name,
                volume_exists=volume_name in self.caches.volumes,
            )
        except ProvisioningError as exc:
            # The library's shouldProvision error (a missing StorageClass): logged and retried,
            # no event (the KCM already posts one about the class).
            log.warning("claim_not_checked", error=exc.message)
            return RETRY
        if not decision.should:
            self._forget(key, claim)
            return DONE
        assert storage_class is not None
        owner = ownership.ownership(claim, storage_class, options=self.options)
        if owner is ownership.Ownership.NOT_OURS:
            self._forget(key, claim)
            return DONE
        if owner is ownership.Ownership.COMPETE:
            return await self._compete(key, claim, storage_class)
        self.competing.pop(key, None)
        delay = slow_retry_delay(
            self.slow_retries.get(key),
            now=time.monotonic(),
            storage_class_uid=_uid(storage_class),
            retry_interval_max=self.options.retry_interval_max,
        )
        if delay is not None:
            return retry_after(delay)
        self.slow_retries.pop(key, None)
        node_name = decisions.selected_node(claim)
        if node_name is not None and self.caches.nodes.get(node_name) is None:
            # The library looks the selected Node up first (its lister): gone = reschedule.
            error = decisions.missing_node_error(node_name)
            return await self._handle_failure(key, claim, storage_class, error, error.state)
        return await self.provision(key, claim, storage_class)

    async def _compete(self, key: str, claim: Body, storage_class: Body) -> Outcome:
        """Node deployment, Immediate claim: after a random delay, try to claim it for us."""
        attempts, ready_at = self.competing.get(key, (0, None))
        now = time.monotonic()
        if ready_at is None:
            delay = ownership.claim_delay(attempts, options=self.options)
            self.competing[key] = (attempts, now + delay)
            return retry_after(delay)
        if now < ready_at:
            return retry_after(ready_at - now)
        if not await self._has_room(claim, storage_class):
            self.competing[key] = (attempts + 1, None)
            return await self._compete(key, claim, storage_class)
        meta = _meta(claim)
        patch = ownership.selected_node_patch(claim, node_name=self.options.node_name)
        try:
            await self.api.patch(kube.CLAIMS, meta["name"], patch, meta.get("namespace"))
        except kube.ConflictError:
            log.info("claim_taken_elsewhere")  # or changed meanwhile: look again later
            self.competing[key] = (attempts + 1, None)
            return await self._compete(key, claim, storage_class)
        except kube.NotFoundError:
            self.competing.pop(key, None)
            return DONE
        self.competing.pop(key, None)
        log.info("claim_selected_for_node", node=self.options.node_name)
        return DONE  # the claim's update (now naming our node) queues it again

    async def _has_room(self, claim: Body, storage_class: Body) -> bool:
        """With GET_CAPACITY: does our node's segment have room for the claim?"""
        if not self.driver.has_controller("GET_CAPACITY"):
            return True
        node = self.caches.nodes.get(self.options.node_name)
        csinode = self.caches.csinodes.get(self.options.node_name)
        labels = (node or {}).get("metadata", {}).get("labels") or {}
        keys = [
            key
            for entry in (csinode or {}).get("spec", {}).get("drivers") or ()
            if entry.get("name") == self.driver.name
            for key in entry.get("topologyKeys") or ()
        ]
        segment = {key: labels[key] for key in keys if key in labels}
        try:
            answer = await self.csi.get_capacity(
                csi.GetCapacityRequest(
                    parameters=dict(storage_class.get("parameters") or {}),
                    accessible_topology=csi.Topology(segments=segment) if segment else None,
                )
            )
            needed = requests.requested_bytes(claim)
        except (CSIError, ProvisioningError) as exc:
            log.warning("capacity_check_failed", error=str(exc))
            return False
        return answer.available_capacity >= needed

    async def provision(self, key: str, claim: Body, storage_class: Body) -> Outcome:
        await self.recorder.post(
            claim,
            type_=events.NORMAL,
            reason=names.REASON_PROVISIONING,
            message=decisions.provisioning_message(claim),
        )
        try:
            volume = await self._provision(claim, storage_class)
        except IgnoredError as exc:
            if exc.event_message:
                await self.recorder.post(
                    claim, type_=events.NORMAL, reason=names.REASON_PROVISIONING,
                    message=exc.event_message,
                )  # fmt: skip
            self._forget(key, claim)
            return DONE
        except ProvisioningError as exc:
            return await self._handle_failure(key, claim, storage_class, exc, exc.state)
        except CSIError as exc:
            state = state_for(exc, may_reschedule=self._may_reschedule(claim))
            return await self._handle_failure(key, claim, storage_class, exc, state)
        self._forget(key, claim)
        log.info("volume_provisioned", volume=volume["metadata"]["name"])
        await self.recorder.post(
            claim,
            type_=events.NORMAL,
            reason=names.REASON_PROVISIONING_SUCCEEDED,
            message=decisions.succeeded_message(volume["metadata"]["name"]),
        )
        return DONE

    async def _provision(self, claim: Body, storage_class: Body) -> dict[str, Any]:
        plan = requests.plan_request(
            claim,
            storage_class,
            options=self.options,
            plugin_capabilities=self.driver.plugin_capabilities,
            controller_capabilities=self.driver.controller_capabilities,
        )
        parameters = storage_class.get("parameters")
        refs = secrets.secret_references(parameters, volume_name=plan.volume_name, claim=claim)
        secret_data = await self._secret_data(refs.provisioner, required=True)
        content_source = await self._content_source(claim, plan, storage_class)
        requirement = await self._accessibility(claim, storage_class)
        vac = await self._volume_attributes_class(plan.volume_attributes_class)
        request = requests.build_create_request(
            plan,
            claim=claim,
            storage_class=storage_class,
            options=self.options,
            driver_name=self.driver.name,
            secrets=secret_data,
            content_source=content_source,
            accessibility_requirements=requirement,
            volume_attributes_class=vac,
        )
        if self.journal is not None:
            try:
                await self.journal.record(claim)
            except JournalError as exc:
                raise ProvisioningError(str(exc), state=ProvisioningState.NO_CHANGE) from exc
        response = await self.csi.create_volume(request)
        if response.volume is None:
            raise ProvisioningError(
                "CreateVolume returned no volume", state=ProvisioningState.IN_BACKGROUND
            )
        problem = response_problem(response.volume, claim=claim, required_bytes=plan.required_bytes)
        if problem is not None:
            await self._clean_up(response.volume, secret_data, problem.cleanup)
            raise ProvisioningError(problem.message, state=ProvisioningState.IN_BACKGROUND)
        volume = build_volume(
            claim=claim,
            storage_class=storage_class,
            plan=plan,
            volume=response.volume,
            secrets=refs,
            driver_name=self.driver.name,
            identity=self.identity,
            options=self.options,
            supports_topology=self.supports_topology,
        )
        await self._save(volume)
        await self._release_snapshot_source(claim)
        return volume

    async def _save(self, volume: dict[str, Any]) -> None:
        """Create the PV; one that exists already counts as saved (the library's volume store)."""
        try:
            created = await self.api.create(kube.VOLUMES, volume)
        except kube.ConflictError:
            created = volume
        except kube.KubeError as exc:
            # The driver has the volume now: keep retrying with the same name (idempotent).
            raise ProvisioningError(
                f"error saving volume {volume['metadata']['name']}: {exc}",
                state=ProvisioningState.IN_BACKGROUND,
            ) from exc
        self.caches.volumes.store(created)

    async def _clean_up(self, volume: csi.Volume, secret_data: Mapping[str, str], why: str) -> None:
        log.warning("volume_rejected", volume_id=volume.volume_id, reason=why)
        request = csi.DeleteVolumeRequest(volume_id=volume.volume_id, secrets=dict(secret_data))
        try:
            await self.csi.delete_volume(request)
        except CSIError as exc:
            log.warning("volume_cleanup_failed", volume_id=volume.volume_id, error=str(exc))

    async def _handle_failure(
        self,
        key: str,
        claim: Body,
        storage_class: Body,
        error: Exception,
        state: ProvisioningState,
    ) -> Outcome:
        outcome = failure_outcome(error, state=state, claim=claim)
        if outcome.state is ProvisioningState.IN_BACKGROUND:
            self.in_progress[key] = claim
        elif outcome.state is ProvisioningState.FINISHED:
            self.in_progress.pop(key, None)
            self._release(claim)
        await self.recorder.post(
            claim,
            type_=events.WARNING,
            reason=names.REASON_PROVISIONING_FAILED,
            message=outcome.message,
        )
        log.warning("provisioning_failed", state=outcome.state.name, error=error_text(error))
        if outcome.infeasible:
            self.slow_retries[key] = SlowRetry(time.monotonic(), _uid(storage_class))
            return retry_after(self.options.retry_interval_max)
        if outcome.reschedule:
            if not await self._reschedule(claim):
                return RETRY  # the node is still selected: the library retries the claim
            self.topology_memos.pop(_uid(claim), None)
            return DONE
        if key not in self.caches.claims and key not in self.in_progress:
            return DONE  # deleted, and nothing can still be running on the driver
        return RETRY

    async def _reschedule(self, claim: Body) -> bool:
        """Give the node back to the scheduler: remove `selected-node` (guarded by the uid)."""
        meta = _meta(claim)
        patch = [
            {"op": "test", "path": "/metadata/uid", "value": meta.get("uid")},
            {"op": "remove", "path": "/metadata/annotations/" + _escape(names.ANN_SELECTED_NODE)},
        ]
        try:
            await self.api.patch(
                kube.CLAIMS, meta["name"], patch, meta.get("namespace"), patch_type="json"
            )
        except kube.KubeError as exc:
            log.warning("reschedule_failed", error=str(exc))
            return False
        return True

    def _forget(self, key: str, claim: Body) -> None:
        self.in_progress.pop(key, None)
        self.slow_retries.pop(key, None)
        self.topology_memos.pop(_uid(claim), None)
        self._release(claim)

    def _release(self, claim: Body) -> None:
        if self.journal is not None:
            self.journal.release(_uid(claim))

    async def resume(self) -> list[str]:
        """After a restart: remember the journal's claims that were deleted meanwhile.

        Returns their keys, to be queued: their CreateVolume may have run, so they are
        provisioned to the end (and then released and deleted) instead of being forgotten.
        """
        if self.journal is None:
            return []
        keys = []
        for uid, claim in (await self.journal.load()).items():
            meta = claim.get("metadata", {})
            key = f"{meta.get('namespace')}/{meta.get('name')}"
            current = await self.api.get(kube.CLAIMS, meta.get("name", ""), meta.get("namespace"))
            if current is None or _uid(current) != uid:
                self.in_progress[key] = claim
                log.info("resuming_deleted_claim", claim=key, uid=uid)
            keys.append(key)
        return keys

    def _volume_name(self, claim: Body) -> str:
        return naming.claim_volume_name(
            claim,
            prefix=self.options.volume_name_prefix,
            uuid_length=self.options.volume_name_uuid_length,
        )

    def _may_reschedule(self, claim: Body) -> bool:
        return decisions.may_reschedule(
            supports_topology=self.supports_topology,
            selected_node=decisions.selected_node(claim),
        )

    # -- what a claim needs read ---------------------------------------------------------------

    async def _secret_data(
        self, ref: secrets.SecretRef | None, *, required: bool
    ) -> dict[str, str]:
        if ref is None:
            return {}
        try:
            secret = await self.api.get(kube.SECRETS, ref.name, ref.namespace)
        except kube.KubeError as exc:
            secret, error = None, exc.message  # the API's own text, as client-go's err prints
        else:
            error = f'secrets "{ref.name}" not found'  # apimachinery's NotFound text
        if secret is None:
            # external-provisioner's getCredentials, verbatim.
            message = f"error getting secret {ref.name} in namespace {ref.namespace}: {error}"
            if required:
                raise ProvisioningError(message, state=ProvisioningState.NO_CHANGE)
            log.warning("secret_unavailable", secret=f"{ref.namespace}/{ref.name}", error=error)
            return {}
        data = secret.get("data") or {}
        return {k: base64.b64decode(v).decode("utf-8", "replace") for k, v in data.items()}

    async def _content_source(
        self, claim: Body, plan: requests.RequestPlan, storage_class: Body
    ) -> csi.VolumeContentSource | None:
        ref = plan.data_source
        if ref is None or plan.source_kind is None:
            return None
        if plan.source_kind is sources.SourceKind.CLONE:
            source_claim = await self.api.get(kube.CLAIMS, ref.name, ref.namespace)
            if source_claim is None:
                raise sources.source_claim_unavailable(ref, claim=claim, error="not found")
            volume_name = source_claim.get("spec", {}).get("volumeName") or ""
            source_volume = await self.api.get(kube.VOLUMES, volume_name) if volume_name else None
            cloned = sources.clone_source(
                claim,
                ref=ref,
                storage_class=storage_class,
                source_claim=source_claim,
                source_volume=source_volume,
            )
            await self._protect(kube.CLAIMS, source_claim, protection.protect_clone_source)
            return cloned
        snapshot = await self.api.get(kube.SNAPSHOTS, ref.name, ref.namespace)
        if snapshot is None:
            raise sources.snapshot_unavailable(ref, error="not found")
        content_name = sources.snapshot_content_name(snapshot)
        content = await self.api.get(kube.SNAPSHOT_CONTENTS, content_name) if content_name else None
        source = sources.snapshot_source(
            claim,
            ref=ref,
            storage_class=storage_class,
            snapshot=snapshot,
            content=content,
            prevent_volume_mode_conversion=self.options.prevent_volume_mode_conversion,
        )
        await self._protect(kube.SNAPSHOTS, snapshot, protection.protect_snapshot_source)
        return source

    async def _protect(self, resource: kube.Resource, obj: Body, change: Any) -> None:
        """Put a source-protection finalizer on the source before CreateVolume may use it."""
        finalizers = change(obj)
        if finalizers is None:
            return
        try:
            await self._patch_finalizers(resource, obj, finalizers)
        except kube.KubeError as exc:
            # The source changed under us (422/409) or is gone: retry the claim, fresh.
            raise ProvisioningError(
                f"failed to protect the data source {_meta(obj).get('name')}: {exc}",
                state=ProvisioningState.NO_CHANGE,
            ) from exc

    async def _release_snapshot_source(self, claim: Body) -> None:
        """After the PV is saved, the restored snapshot loses its protection (errors: logged)."""
        ref = sources.data_source(claim)
        if ref is None or ref.kind != names.KIND_VOLUME_SNAPSHOT:
            return
        try:
            snapshot = await self.api.get(kube.SNAPSHOTS, ref.name, ref.namespace)
            finalizers = protection.release_snapshot_source(snapshot) if snapshot else None
            if snapshot is not None and finalizers is not None:
                await self._patch_finalizers(kube.SNAPSHOTS, snapshot, finalizers)
        except (kube.KubeError, ProvisioningError) as exc:
            log.warning("snapshot_release_failed", snapshot=ref.name, error=str(exc))

    # -- source protection controllers ---------------------------------------------------------

    async def sync_clone_source(self, key: str) -> Outcome:
        """A deleting source PVC loses cloning-protection once no Pending claim clones it."""
        source = self.caches.claims.get(key)
        if source is None:
            return DONE
        finalizers = protection.release_clone_source(source, claims=self.caches.claims)
        if finalizers is None:
            if _meta(source).get("deletionTimestamp") and names.FINALIZER_CLONING_PROTECTION in (
                _meta(source).get("finalizers") or ()
            ):
                return RETRY  # a clone is still pending: look again later
            return DONE
        try:
            updated = await self._patch_finalizers(kube.CLAIMS, source, finalizers)
        except kube.KubeError as exc:
            log.warning("clone_source_release_failed", claim=key, error=str(exc))
            return RETRY
        self.caches.claims.store(updated)
        return DONE

    async def sweep_snapshot_sources(self) -> int:
        """Remove snapshot-as-source protection that no pending claim needs (upstream #1458)."""
        pending = protection.pending_snapshot_keys(self.caches.claims)
        released = 0
        for snapshot in await self.api.list(kube.SNAPSHOTS):
            finalizers = protection.release_orphaned_snapshot(snapshot, pending=pending)
            if finalizers is None:
                continue
            try:
                await self._patch_finalizers(kube.SNAPSHOTS, snapshot, finalizers)
                released += 1
            except kube.KubeError as exc:
                log.warning("snapshot_release_failed", snapshot=_meta(snapshot).get("name"),
                            error=str(exc))  # fmt: skip
        return released

    async def _accessibility(
        self, claim: Body, storage_class: Body
    ) -> csi.TopologyRequirement | None:
        if not self.supports_topology:
            return None
        uid = _uid(claim)
        result = topology.accessibility_requirements(
            driver_name=self.driver.name,
            claim_name=_meta(claim).get("name", ""),
            allowed_topologies=storage_class.get("allowedTopologies"),
            selected_node=decisions.selected_node(claim) or "",
            strict_topology=self.options.strict_topology,
            immediate_topology=self.options.immediate_topology,
            csinodes=list(self.caches.csinodes),
            nodes=list(self.caches.nodes),
            memo=self.topology_memos.get(uid),
        )
        self.topology_memos[uid] = result.memo
        return result.requirement

    async def _volume_attributes_class(self, name: str) -> Body | None:
        if not name:
            return None
        vac = await self.api.get(kube.VOLUME_ATTRIBUTES_CLASSES, name)
        if vac is None:
            raise ProvisioningError(
                f"error getting VolumeAttributesClass {name}: not found",
                state=ProvisioningState.NO_CHANGE,
            )
        return vac

    # -- volumes -------------------------------------------------------------------------------

    async def sync_volume(self, name: str) -> Outcome:
        volume = self.caches.volumes.get(name)
        if volume is None:
            return DONE
        with structlog.contextvars.bound_contextvars(
            kind="PersistentVolume", name=name, uid=_uid(volume)
        ):
            return await self._sync_volume(volume)

    async def _sync_volume(self, volume: Body) -> Outcome:
        known = deletions.is_ours(volume, driver_name=self.driver.name)
        if not known:
            return DONE
        finalizers = deletions.volume_finalizers(volume)
        if finalizers is not None:
            volume = await self._set_finalizers(volume, finalizers)
        if not deletions.should_delete(volume, driver_name=self.driver.name).should:
            return DONE
        try:
            await self._delete(volume)
        except (deletions.DeletionError, CSIError, kube.KubeError) as exc:
            text = error_text(exc) if isinstance(exc, CSIError) else str(exc)
            log.warning("volume_delete_failed", error=text)
            await self.recorder.post(
                volume, type_=events.WARNING, reason=names.REASON_VOLUME_FAILED_DELETE,
                message=text,
            )  # fmt: skip
            return RETRY
        return DONE

    async def _delete(self, volume: Body) -> None:
        meta = _meta(volume)
        if self.driver.has_controller("PUBLISH_UNPUBLISH_VOLUME"):
            blocker = deletions.blocking_attachment(volume, attachments=self.caches.attachments)
            if blocker is not None:
                raise deletions.DeletionError(blocker)
        class_name = volume.get("spec", {}).get("storageClassName") or ""
        storage_class = self.caches.storage_classes.get(class_name)
        try:
            ref = secrets.deletion_secret_reference(volume, storage_class=storage_class)
        except (secrets.SecretReferenceError, ProvisioningError) as exc:
            raise deletions.DeletionError(str(exc)) from exc
        secret_data = await self._secret_data(ref, required=False)
        request = deletions.delete_request(
            volume,
            secrets=secret_data,
            plugin_capabilities=self.driver.plugin_capabilities,
            controller_capabilities=self.driver.controller_capabilities,
        )
        await self.csi.delete_volume(request)
        log.info("volume_deleted")
        if not meta.get("deletionTimestamp"):
            await self.api.delete(kube.VOLUMES, meta["name"], uid=_uid(volume))
        current = await self.api.get(kube.VOLUMES, meta["name"])
        if current is not None:
            remaining = [
                f for f in _meta(current).get("finalizers") or () if f != names.FINALIZER_PV
            ]
            await self._set_finalizers(current, remaining)

    async def _set_finalizers(self, volume: Body, finalizers: list[str]) -> Body:
        updated = await self._patch_finalizers(kube.VOLUMES, volume, finalizers)
        self.caches.volumes.store(updated)
        return updated

    async def _patch_finalizers(
        self, resource: kube.Resource, obj: Body, finalizers: list[str]
    ) -> Body:
        """Replace an object's finalizers, guarded against a stale read (a JSON-patch `test`).

        A stale cache (external-provisioner #1217: two sidecars patching one PV's finalizers)
        then fails with 422/409 and is retried with a fresh read, instead of dropping the other
        writer's finalizer.
        """
        meta = _meta(obj)
        patch = [
            {"op": "test", "path": "/metadata/resourceVersion", "value": meta["resourceVersion"]},
            {"op": "replace" if "finalizers" in meta else "add", "path": "/metadata/finalizers",
             "value": finalizers},
        ]  # fmt: skip
        return await self.api.patch(
            resource, meta["name"], patch, meta.get("namespace"), patch_type="json"
        )


def _meta(obj: Body) -> Mapping[str, Any]:
    meta: Mapping[str, Any] = obj.get("metadata", {})
    return meta


def _uid(obj: Body) -> str:
    return str(_meta(obj).get("uid", ""))


def _escape(key: str) -> str:
    """A JSON-pointer segment (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")
