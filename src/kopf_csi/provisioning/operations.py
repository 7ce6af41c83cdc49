"""The provisioning controller: claims become volumes, through one back end.

Async orchestration only: each step is a guard clause that reads (caches first, the API where
the Go code reads the API), calls a pure builder from this package, calls the back end, writes.
It is the port of the library's `syncClaim` / `provisionClaimOperation`, plus the in-flight
journal and node deployment. The back end (`backends.ProvisionerBackend`) makes the storage:
the CSI driver's (`csi_backend.CSIBackend`, external-provisioner's `Provision`), or one a
handler module registered. Released volumes are `reclaiming`'s, data sources `sourcing`'s. No
kopf here: each operation returns a `queueing.Outcome` for the work queue to act on.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Any

import structlog

from kopf_csi import events, kube, names
from kopf_csi.caches import Caches
from kopf_csi.csi import CSIClient, CSIError, DriverInfo
from kopf_csi.csi import messages as csi
from kopf_csi.observing import ProvisioningObserver, claim_labels
from kopf_csi.provisioning import capacity, decisions, naming, ownership, requests, topology
from kopf_csi.provisioning.access import meta as meta_of
from kopf_csi.provisioning.access import uid as uid_of
from kopf_csi.provisioning.backends import (
    BlockProvisioner,
    ProvisionerBackend,
    ProvisionOptions,
    Qualifier,
)
from kopf_csi.provisioning.csi_backend import CSIBackend
from kopf_csi.provisioning.errors import IgnoredError, ProvisioningError
from kopf_csi.provisioning.hooks import CreateVolumeHook
from kopf_csi.provisioning.journal import Journal, JournalError
from kopf_csi.provisioning.options import ProvisionerOptions
from kopf_csi.provisioning.parameters import driver_parameters
from kopf_csi.provisioning.reclaiming import Reclaimer
from kopf_csi.provisioning.reservations import Reservations
from kopf_csi.provisioning.sourcing import Sources
from kopf_csi.provisioning.states import (
    ProvisioningState,
    SlowRetry,
    error_text,
    failure_outcome,
    slow_retry_delay,
)
from kopf_csi.provisioning.volumes import complete_volume
from kopf_csi.queueing import DONE, RETRY, Outcome, retry_after

__all__ = ["Provisioner"]

log = structlog.get_logger("kopf_csi.provisioning")
Body = Mapping[str, Any]


class Provisioner:
    """The provisioner's state and its operations on claims and volumes.

    With a CSI driver (`csi_client` and `driver`) and no `backend`, the back end is the driver
    (`csi_backend.CSIBackend`) and the provisioner name is the driver's. With a `backend`, the
    provisioner serves `name` with it, and needs no driver.
    """

    def __init__(
        self,
        *,
        api: kube.KubeClient,
        recorder: events.Recorder,
        caches: Caches,
        options: ProvisionerOptions,
        csi_client: CSIClient | None = None,
        driver: DriverInfo | None = None,
        identity: str = "",
        journal: Journal | None = None,
        hooks: Sequence[CreateVolumeHook] = (),
        observer: ProvisioningObserver | None = None,
        backend: ProvisionerBackend | None = None,
        name: str | None = None,
        reservations: Reservations | None = None,
    ) -> None:
        self.csi = csi_client
        self.api = api
        self.recorder = recorder
        self.caches = caches
        self.driver = driver
        self.options = options
        self.identity = identity
        self.journal = journal
        self.hooks = hooks
        """Users' CreateVolume hooks (`kopf_csi.provisioning.hooks`), read at every attempt."""
        self.reservations = reservations if reservations is not None else Reservations()
        """The hooks' holds (`context.reserve`): released when an attempt fails with nothing
        left on the driver, or (by the claim's watch) when the claim is deleted."""
        self.observer = observer
        """Metrics (`kopf_csi.observing`): told of every provisioning attempt's outcome."""
        self.sources = Sources(api=api, caches=caches, options=options)
        self.topology_memos: dict[str, topology.TopologyMemo] = {}
        self.csi_backend: CSIBackend | None = None
        if backend is None:
            if csi_client is None or driver is None:
                raise ValueError("a provisioner needs a back end, or a CSI driver")
            self.csi_backend = backend = CSIBackend(
                csi_client=csi_client, api=api, caches=caches, driver=driver, options=options,
                identity=identity, sources=self.sources, hooks=hooks,
                topology_memos=self.topology_memos, record=self._record,
                reservations=self.reservations,
            )  # fmt: skip
        self.backend: ProvisionerBackend = backend
        if name is None:
            if driver is None:
                raise ValueError("a provisioner back end needs a name")
            name = driver.name
        self.name = name
        """The provisioner name: StorageClasses' `provisioner`, claims' storage-provisioner."""
        self.qualifier = backend if isinstance(backend, Qualifier) else None
        self.block = isinstance(backend, BlockProvisioner) and backend.supports_block()
        self.reclaimer = Reclaimer(
            api=api, recorder=recorder, caches=caches, name=name, backend=backend,
            observer=observer,
        )  # fmt: skip
        self.in_progress: dict[str, Body] = {}
        """Claims whose CreateVolume may still run on the driver (claimsInProgress)."""
        self.slow_retries: dict[str, SlowRetry] = {}
        self.unsaved: dict[str, dict[str, Any]] = {}
        """PVs made on the back end whose POST met an outage, by claim UID: the next attempt
        saves the same PV without asking the back end again (external-provisioner keeps its
        unsaved PVs the same way; a restart forgets them, and the journal finishes the claim
        with a CreateVolume that finds its volume)."""
        self.saves_in_doubt: set[str] = set()
        """PVs whose POST got no answer: they may exist. Read before the claim's next attempt,
        which would otherwise call CreateVolume again before the PV's watch event came."""
        self.competing: dict[str, tuple[int, float | None]] = {}
        """Node deployment: Immediate claims we wait to claim (attempts, when to try)."""

    # -- claims --------------------------------------------------------------------------------

    async def sync_claim(self, key: str) -> Outcome:
        claim = self.caches.claims.get(key)
        remembered = self.in_progress.get(key)
        if claim is None or (
            remembered is not None and uid_of(remembered) != uid_of(claim) and claim is not None
        ):
            # Deleted (or replaced): only a CreateVolume that may still run needs finishing.
            if remembered is None:
                return DONE
            claim = remembered
        bound = structlog.contextvars.bound_contextvars(
            kind="PersistentVolumeClaim", namespace=meta_of(claim).get("namespace"),
            name=meta_of(claim).get("name"), uid=uid_of(claim),
        )  # fmt: skip
        with bound:
            return await self._sync_claim(key, claim)

    async def _sync_claim(self, key: str, claim: Body) -> Outcome:
        storage_class = self.caches.storage_classes.get(naming.claim_class_name(claim))
        volume_name = self._volume_name(claim)
        if volume_name in self.saves_in_doubt and not await self._settle_doubt(volume_name):
            return RETRY  # the API server does not answer yet: said once, by the client
        try:
            decision = decisions.should_provision(
                claim,
                storage_class,
                driver_name=self.name,
                volume_exists=volume_name in self.caches.volumes,
            )
        except ProvisioningError as exc:
            # The library's shouldProvision error (a missing StorageClass): logged and retried,
            # no event (the KCM already posts one about the class). At debug: a claim created
            # right after its class often comes before the class's watch event (a normal
            # race, gone at the retry); a class that stays missing is KCM's event, explain's.
            log.debug("claim_not_checked", error=exc.message)
            self._observe_failure(claim)
            return RETRY
        if not decision.should or (
            self.qualifier is not None and not self.qualifier.should_provision(claim)
        ):
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
            storage_class_uid=uid_of(storage_class),
            retry_interval_max=self.options.retry_interval_max,
        )
        if delay is not None:
            return retry_after(delay)
        self.slow_retries.pop(key, None)
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
        meta = meta_of(claim)
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
        if self.csi is None or self.driver is None:
            return True  # a back end without a CSI driver: no capacity to ask for
        if not self.driver.has_controller("GET_CAPACITY"):
            return True
        name = self.options.node_name
        node, csinode = self.caches.nodes.get(name), self.caches.csinodes.get(name)
        found = capacity.segments(
            driver_name=self.driver.name,
            csinodes=[csinode] if csinode else [],
            nodes=[node] if node else [],
        )
        try:
            answer = await self.csi.get_capacity(
                csi.GetCapacityRequest(
                    parameters=driver_parameters(storage_class.get("parameters")),
                    accessible_topology=csi.Topology(segments=dict(found[0])) if found else None,
                )
            )
            needed = requests.requested_bytes(claim)
        except (CSIError, ProvisioningError) as exc:
            log.warning("capacity_check_failed", error=str(exc))
            return False
        return answer.available_capacity >= needed

    async def provision(self, key: str, claim: Body, storage_class: Body) -> Outcome:
        started = time.monotonic()
        if self.csi_backend is None:
            refused = await self._check_can_provision(key, claim, storage_class)
            if refused is not None:
                return refused
        await self.recorder.post(
            claim,
            type_=events.NORMAL,
            reason=names.REASON_PROVISIONING,
            message=decisions.provisioning_message(claim),
        )
        try:
            volume = await self._provision(claim, storage_class)
        except IgnoredError as exc:
            self.reservations.release(uid_of(claim))
            if exc.event_message:
                await self.recorder.post(
                    claim, type_=events.NORMAL, reason=names.REASON_PROVISIONING,
                    message=exc.event_message,
                )  # fmt: skip
            self._forget(key, claim)
            return DONE
        except ProvisioningError as exc:
            return await self._handle_failure(key, claim, storage_class, exc, exc.state)
        except Exception:
            # A bug in the back end: retried by the queue (it logs it), no event; but it may
            # have made storage already, so the claim is finished even if it is deleted.
            self.in_progress[key] = claim
            raise
        self._forget(key, claim)
        if self.observer is not None:
            class_name, source = claim_labels(claim)
            seconds = time.monotonic() - started
            self.observer.provisioned(class_name=class_name, source=source, seconds=seconds)
        log.info("volume_provisioned", volume=volume["metadata"]["name"])
        await self.recorder.post(
            claim,
            type_=events.NORMAL,
            reason=names.REASON_PROVISIONING_SUCCEEDED,
            message=decisions.succeeded_message(volume["metadata"]["name"]),
        )
        return DONE

    async def _provision(self, claim: Body, storage_class: Body) -> dict[str, Any]:
        options = ProvisionOptions(
            claim=claim,
            storage_class=storage_class,
            volume_name=self._volume_name(claim),
            selected_node=self._selected_node(claim),
        )
        volume = self.unsaved.pop(uid_of(claim), None)
        if volume is None:
            if self.csi_backend is None:  # the CSI back end records just before CreateVolume
                await self._record(claim)
            result = await self.backend.provision(options)
            if result.volume is None:
                raise result.error()
            volume = complete_volume(
                result.volume,
                claim=claim,
                storage_class=storage_class,
                volume_name=options.volume_name,
                requested_bytes=options.requested_bytes,
            )
        try:
            await self._save(volume)
        except ProvisioningError as exc:
            if kube.is_unavailable(exc):  # the API server is away: keep what the driver made
                self.unsaved[uid_of(claim)] = volume
            raise
        if self.csi_backend is not None:  # only the CSI back end protects its data sources
            await self.sources.release_snapshot_source(claim)
        return volume

    def _selected_node(self, claim: Body) -> Body | None:
        name = decisions.selected_node(claim)
        return self.caches.nodes.get(name) if name else None

    async def _check_can_provision(
        self, key: str, claim: Body, storage_class: Body
    ) -> Outcome | None:
        """The library's checks before its `Provisioning` event, for a back end other than the
        CSI driver's (which makes its own, in external-provisioner's order): block support
        (`canProvision`: an event, and no retry until the claim changes), and the selected
        node (gone: the claim is rescheduled)."""
        if (claim.get("spec") or {}).get("volumeMode") == "Block" and not self.block:
            message = f"{self.name} does not support block volume provisioning"
            self._observe_failure(claim)
            await self.recorder.post(
                claim, type_=events.WARNING, reason=names.REASON_PROVISIONING_FAILED,
                message=message,
            )  # fmt: skip
            log.warning("provisioning_refused", error=message)
            self._forget(key, claim)
            return DONE
        node_name = decisions.selected_node(claim)
        if node_name and self.caches.nodes.get(node_name) is None:
            error = decisions.missing_node_error(node_name)
            return await self._handle_failure(key, claim, storage_class, error, error.state)
        return None

    async def _record(self, claim: Body) -> None:
        """Into the in-flight journal, just before the back end may start making the volume."""
        if self.journal is not None:
            try:
                await self.journal.record(claim)
            except JournalError as exc:
                raise ProvisioningError(str(exc), state=ProvisioningState.NO_CHANGE) from exc

    async def _save(self, volume: dict[str, Any]) -> None:
        """Create the PV; one that exists already counts as saved (the library's volume store),
        unless it is being deleted: that is an earlier PV of the same name on its way out (a
        deleted claim finished after a restart), and the new volume would be left without one.
        Then the save is retried until the old PV is gone."""
        name = volume["metadata"]["name"]
        created: Body
        try:
            created = await self.api.create(kube.VOLUMES, volume)
        except kube.ConflictError:
            existing = await self._existing_volume(name)
            if existing is None or meta_of(existing).get("deletionTimestamp"):
                raise ProvisioningError(
                    f"error saving volume {name}: a volume of that name is being deleted",
                    state=ProvisioningState.IN_BACKGROUND,
                ) from None
            created = existing
        except kube.KubeError as exc:
            # The driver has the volume now: keep retrying with the same name (idempotent).
            if kube.is_unavailable(exc) and not exc.status:  # no answer: it may have landed
                self.saves_in_doubt.add(name)
            raise ProvisioningError(
                f"error saving volume {name}: {exc}", state=ProvisioningState.IN_BACKGROUND
            ) from exc
        self.caches.volumes.store(created)

    async def _settle_doubt(self, name: str) -> bool:
        """Whether the PV whose POST got no answer is known now: read, and cached if it
        landed (then the claim is done: no second CreateVolume, no second PV)."""
        if name not in self.caches.volumes:
            try:
                found = await self.api.get(kube.VOLUMES, name)
            except kube.KubeError as exc:
                log.debug("volume_save_in_doubt", volume=name, error=str(exc))
                return False
            if found is not None:
                self.caches.volumes.store(found)
        self.saves_in_doubt.discard(name)
        return True

    async def _existing_volume(self, name: str) -> Body | None:
        try:
            return await self.api.get(kube.VOLUMES, name)
        except kube.KubeError as exc:
            raise ProvisioningError(
                f"error saving volume {name}: {exc}", state=ProvisioningState.IN_BACKGROUND
            ) from exc

    async def _handle_failure(
        self,
        key: str,
        claim: Body,
        storage_class: Body,
        error: Exception,
        state: ProvisioningState,
    ) -> Outcome:
        self._observe_failure(claim)
        outcome = failure_outcome(error, state=state, claim=claim)
        if outcome.state is not ProvisioningState.IN_BACKGROUND:  # nothing left on the driver
            self.reservations.release(uid_of(claim))
        if outcome.state is ProvisioningState.IN_BACKGROUND:
            self.in_progress[key] = claim
        elif outcome.state is ProvisioningState.FINISHED:
            self.in_progress.pop(key, None)
            self._release(claim)
        if kube.is_unavailable(error):
            # The API server is away: said once (`kube.reachability`); the claim is retried
            # as soon as it is back. A Warning event would only arrive after the claim is Bound.
            log.debug("provisioning_failed", state=outcome.state.name, error=error_text(error))
        else:
            await self.recorder.post(
                claim,
                type_=events.WARNING,
                reason=names.REASON_PROVISIONING_FAILED,
                message=outcome.message,
            )
            log.warning("provisioning_failed", state=outcome.state.name, error=error_text(error))
        if outcome.infeasible:
            self.slow_retries[key] = SlowRetry(time.monotonic(), uid_of(storage_class))
            return retry_after(self.options.retry_interval_max)
        if outcome.reschedule:
            if not await self._reschedule(claim):
                return RETRY  # the node is still selected: the library retries the claim
            self.topology_memos.pop(uid_of(claim), None)
            return DONE
        if key not in self.caches.claims and key not in self.in_progress:
            return DONE  # deleted, and nothing can still be running on the driver
        return RETRY

    async def _reschedule(self, claim: Body) -> bool:
        """Give the node back to the scheduler: remove `selected-node` (a guarded write).

        A claim written meanwhile (409) is read again and decided again; a claim deleted, or
        replaced by another of its name, or whose node is already gone, needs nothing.
        """
        meta = meta_of(claim)
        name, namespace, uid = meta["name"], meta.get("namespace"), meta.get("uid")

        async def write(current: Body) -> None:
            annotations = meta_of(current).get("annotations") or {}
            if meta_of(current).get("uid") != uid or names.ANN_SELECTED_NODE not in annotations:
                return
            patch = {"metadata": {"annotations": {names.ANN_SELECTED_NODE: None}}}
            await self.api.patch(kube.CLAIMS, name, kube.guarded_patch(current, patch), namespace)

        async def read() -> Body | None:
            log.debug("reschedule_raced")
            return await self.api.get(kube.CLAIMS, name, namespace)

        try:
            await kube.retry_on_conflict(write, claim, read=read)
        except kube.NotFoundError:
            return True
        except kube.KubeError as exc:
            log.warning("reschedule_failed", error=str(exc))
            return False
        return True

    def _observe_failure(self, claim: Body) -> None:
        if self.observer is not None:
            class_name, source = claim_labels(claim)
            self.observer.provision_failed(class_name=class_name, source=source)

    def claim_deleted(self, key: str, claim: Body) -> None:
        """The claim's DELETED event: what was kept for its next attempt goes with it (its
        topology memo, its slow retry, its competition; the queue's run for the deleted claim
        returns at once and forgets nothing). Not while a CreateVolume may still run for it
        (`in_progress`): that claim is finished from what was remembered, then forgotten."""
        if key in self.in_progress:
            return
        self.slow_retries.pop(key, None)
        self.competing.pop(key, None)
        self.topology_memos.pop(uid_of(claim), None)

    def _forget(self, key: str, claim: Body) -> None:
        self.in_progress.pop(key, None)
        self.unsaved.pop(uid_of(claim), None)
        self.slow_retries.pop(key, None)
        self.topology_memos.pop(uid_of(claim), None)
        self._release(claim)

    def _release(self, claim: Body) -> None:
        if self.journal is not None:
            self.journal.release(uid_of(claim))

    async def resume(self) -> list[str]:
        """After a restart: decide what each record of the in-flight journal still needs.

        A record's removal may not have reached the API before the restart, so a record does
        not always mean "unfinished". Returns the keys to queue.

        - The claim exists, bound to its volume: the outcome is known; the record goes.
        - The claim exists, unbound: it is provisioned as usual (the record goes with the
          outcome).
        - The claim is gone (or replaced), and its PV exists: the volume has its PV, which the
          deletion path owns; the record goes.
        - The claim is gone and no PV exists: its CreateVolume may have run. It is provisioned
          to the end (then released and deleted) instead of being forgotten (upstream #486).
          A claim whose PV was created and already deleted before the restart, with its
          record's removal lost, comes here too: CreateVolume then makes a volume again, which
          is deleted the same way. That costs a volume's creation, never a leak.
        """
        if self.journal is None:
            return []
        keys = []
        for uid, claim in (await self.journal.load()).items():
            meta = claim.get("metadata", {})
            key = f"{meta.get('namespace')}/{meta.get('name')}"
            volume_name = self._volume_name(claim)
            current = await self._read(
                kube.CLAIMS, key, meta.get("name", ""), meta.get("namespace")
            )
            if current is not None and uid_of(current) == uid:
                if (current.get("spec") or {}).get("volumeName") == volume_name:
                    log.info("journal_record_done", claim=key, uid=uid, volume=volume_name)
                    self.journal.release(uid)
                    continue
            elif await self._read(kube.VOLUMES, key, volume_name) is not None:
                log.info("journal_record_done", claim=key, uid=uid, volume=volume_name)
                self.journal.release(uid)
                continue
            else:
                self.in_progress[key] = claim
                log.info("resuming_deleted_claim", claim=key, uid=uid)
            keys.append(key)
        return keys

    async def _read(
        self, resource: kube.Resource, key: str, name: str, namespace: str | None = None
    ) -> Body | None:
        """GET one object for `resume`, retrying transient API errors of this one read.

        With hundreds of records, one 5xx failing the whole resume (to be restarted from the
        first record) never finished under a 3 % error rate (chaos suite).
        """
        delay = 0.1
        while True:
            try:
                return await self.api.get(resource, name, namespace)
            except kube.KubeError as exc:
                if exc.status < 500 and exc.status != 429:
                    raise
                log.warning("journal_read_retry", claim=key, error=str(exc), delay=delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    def _volume_name(self, claim: Body) -> str:
        return naming.claim_volume_name(
            claim,
            prefix=self.options.volume_name_prefix,
            uuid_length=self.options.volume_name_uuid_length,
        )
