"""Released volumes: deleted in the back end (DeleteVolume on the driver), then the PV and our
finalizer go.

The library's `deleteVolumeOperation`: only our volumes, only Released ones with the Delete
policy, through the back end's `delete` (for the CSI driver: never while a VolumeAttachment
still names the PV, upstream #438, and with the deletion secret); an `IgnoredError` from it
leaves the PV alone. The PV finalizer is added to our Bound Delete-policy
PVs and removed when the policy becomes Retain, so Retain never deletes.

A lost race is not a failure. On a real server the PV controller, the pv-protection
controller and the DELETE itself change a PV within milliseconds of each other, so a write
guarded by a resourceVersion read a moment ago often meets a 409 Conflict. Such a write is
re-read and tried again at once (`access.update_finalizers`), with no event, no
warning and no failure metric. Our finalizer goes after the DELETE with a patch that needs no
resourceVersion (`access.remove_finalizer`), so that write has no race to lose at all. And a
volume whose DeleteVolume succeeded is never deleted on the driver again by this process,
whatever happens to the PV writes after it.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Mapping
from typing import Any

import structlog

from kopf_csi import events, kube, names
from kopf_csi.caches import Caches, object_key
from kopf_csi.csi import CSIError
from kopf_csi.observing import ProvisioningObserver, volume_class
from kopf_csi.provisioning import deletions
from kopf_csi.provisioning.access import meta as meta_of
from kopf_csi.provisioning.access import remove_finalizer, update_finalizers
from kopf_csi.provisioning.access import uid as uid_of
from kopf_csi.provisioning.backends import DeletionGuard, ProvisionerBackend
from kopf_csi.provisioning.errors import IgnoredError
from kopf_csi.provisioning.states import error_text
from kopf_csi.queueing import DONE, RETRY, Outcome

__all__ = ["Reclaimer"]

FINISHED_REMEMBERED = 10_000

log = structlog.get_logger("kopf_csi.provisioning")
Body = Mapping[str, Any]


class Reclaimer:
    """Deletes the backend volumes of released PVs, and keeps the PV finalizer right."""

    def __init__(
        self,
        *,
        api: kube.KubeClient,
        recorder: events.Recorder,
        caches: Caches,
        name: str,
        backend: ProvisionerBackend,
        observer: ProvisioningObserver | None = None,
    ) -> None:
        self.api = api
        self.recorder = recorder
        self.caches = caches
        self.name = name
        """The provisioner name our PVs carry in `pv.kubernetes.io/provisioned-by`."""
        self.backend = backend
        self.guard = backend if isinstance(backend, DeletionGuard) else None
        self.observer = observer
        self.finished: collections.OrderedDict[str, None] = collections.OrderedDict()
        """UIDs of PVs deleted here: the watch events still on their way (deletionTimestamp
        set, our finalizer not yet gone in them) must not start the deletion again."""
        self.deleted_on_driver: collections.OrderedDict[str, None] = collections.OrderedDict()
        """UIDs of PVs whose DeleteVolume succeeded but whose PV writes are not done yet."""

    async def sync_volume(self, name: str) -> Outcome:
        volume = self.caches.volumes.get(name)
        if volume is None:
            return DONE
        with structlog.contextvars.bound_contextvars(
            kind="PersistentVolume", name=name, uid=uid_of(volume)
        ):
            return await self._sync_volume(volume)

    def forget(self, volume: Body) -> None:
        """The PV is gone from the API (its DELETED event): nothing more can arrive about it."""
        self.finished.pop(uid_of(volume), None)
        self.deleted_on_driver.pop(uid_of(volume), None)

    async def _sync_volume(self, volume: Body) -> Outcome:
        if uid_of(volume) in self.finished:
            return DONE
        known = deletions.is_ours(volume, driver_name=self.name)
        if not known:
            return DONE
        started = time.monotonic()
        try:
            current = await self._set_finalizers(volume)
            if current is None or not deletions.should_delete(current, driver_name=self.name):
                return DONE
            if self.guard is not None and not self.guard.should_delete(current):
                log.info("volume_delete_declined")  # the library's DeletionGuard
                return DONE
            await self._delete(current)
        except kube.StaleWriteError as exc:
            # Every re-read lost its race too: the object is busy; the queue tries again soon.
            log.debug("volume_write_raced", error=str(exc))
            return RETRY
        except IgnoredError as exc:
            log.info("volume_delete_ignored", reason=exc.reason)  # another provisioner's
            return DONE
        except deletions.VolumeInUseError as exc:
            self._observe_failure(volume)  # the library counts the attachment guard's error
            log.info("volume_delete_waits_for_detach", reason=str(exc))
            await self.recorder.post(
                volume, type_=events.NORMAL, reason=names.REASON_VOLUME_DELETE, message=str(exc)
            )
            return RETRY
        except (deletions.DeletionError, CSIError, kube.KubeError) as exc:
            text = error_text(exc) if isinstance(exc, CSIError) else str(exc)
            self._observe_failure(volume)
            if kube.is_unavailable(exc):  # said once, by the client; retried when it is back
                log.debug("volume_delete_failed", error=text)
                return RETRY
            log.warning("volume_delete_failed", error=text)
            await self.recorder.post(
                volume, type_=events.WARNING, reason=names.REASON_VOLUME_FAILED_DELETE,
                message=text,
            )  # fmt: skip
            return RETRY
        if self.observer is not None:
            seconds = time.monotonic() - started
            self.observer.deleted(class_name=volume_class(volume), seconds=seconds)
        return DONE

    def _observe_failure(self, volume: Body) -> None:
        if self.observer is not None:
            self.observer.delete_failed(class_name=volume_class(volume))

    async def _delete(self, volume: Body) -> None:
        uid = uid_of(volume)
        if uid not in self.deleted_on_driver:
            await self._delete_on_driver(volume)
            self.deleted_on_driver[uid] = None
            while len(self.deleted_on_driver) > FINISHED_REMEMBERED:
                self.deleted_on_driver.popitem(last=False)
        meta = meta_of(volume)
        if meta.get("deletionTimestamp"):
            current: Body | None = volume
        else:
            # The answer is the PV itself while finalizers hold it (ours does), or a Status.
            answer = await self.api.delete(kube.VOLUMES, meta["name"], uid=uid)
            current = answer if answer is not None and answer.get("kind") != "Status" else None
        if current is not None:
            await remove_finalizer(self.api, kube.VOLUMES, current, names.FINALIZER_PV)
        # Gone as far as we are concerned: a re-run before the DELETED event finds nothing to do
        # (`finished`). The cached copy goes only if no newer one came meanwhile: the watch may
        # have brought the PV without our finalizer already, and the attacher, whose finalizer
        # may still hold it, reads that copy (it stayed stuck on a cache emptied after it).
        cached = self.caches.volumes.get(object_key(volume))
        if cached is not None and cached["metadata"].get("resourceVersion") == meta.get(
            "resourceVersion"
        ):
            self.caches.volumes.remove(volume)
        self.deleted_on_driver.pop(uid, None)
        self.finished[uid] = None
        while len(self.finished) > FINISHED_REMEMBERED:
            self.finished.popitem(last=False)

    async def _delete_on_driver(self, volume: Body) -> None:
        """The back end's `delete` (DeleteVolume for the CSI driver's); its unexpected errors
        fail the attempt like any other (a `VolumeFailedDelete` event with their text)."""
        try:
            await self.backend.delete(volume)
        except (IgnoredError, deletions.DeletionError, CSIError, kube.KubeError):
            raise
        except Exception as exc:
            log.warning("volume_delete_error", exc_info=True)
            raise deletions.DeletionError(str(exc) or type(exc).__name__) from exc

    async def _set_finalizers(self, volume: Body) -> Body | None:
        """Our PV finalizer as the reclaim policy wants it (None: the PV is gone)."""
        updated = await update_finalizers(
            self.api, kube.VOLUMES, volume, deletions.volume_finalizers
        )
        if updated is not None and updated is not volume:
            self.caches.volumes.store(updated)
        return updated
