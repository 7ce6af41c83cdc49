"""The csi-snapshotter's operations: create, poll, delete and release VolumeSnapshotContents.

Async orchestration only, the port of external-snapshotter's `csiSnapshotSideCarController`
(`syncContent` and what it calls) and its `csiHandler`/`snapshotter`: each step reads (the
content and class caches, as Go reads its listers; the API for secrets and for the content
before a status write), decides with `decisions`/`parameters`, calls the driver, writes.
`sync(name)` returns a `queueing.Outcome`; the work queue (`handlers/snapshotter.py`) retries
a failure, and polls a snapshot that is not ready, with the per-content backoff (1 s → 5 min).

The order of writes around CreateSnapshot is the leak protection: the being-created
annotation is saved before the call and removed only after the status holds the snapshot
handle, or after a final error. While it is there, a deleted content is not released.
"""

from __future__ import annotations

import collections
import datetime
import time
from collections.abc import Mapping
from typing import Any

import structlog

from kopf_csi import events, kube, logs, names
from kopf_csi.caches import Cache
from kopf_csi.csi import Code, CSIClient, CSIError, DriverInfo
from kopf_csi.csi import messages as csi
from kopf_csi.provisioning.gofmt import go_quote
from kopf_csi.queueing import DONE, RETRY, Outcome
from kopf_csi.snapshotting import decisions, parameters
from kopf_csi.snapshotting.errors import (
    SnapshotError,
    controller_update_error,
    error_text,
    is_final,
    quoted,
)
from kopf_csi.snapshotting.options import SnapshotterOptions

DELETED_REMEMBERED = 10_000

__all__ = ["ContentCache", "Snapshotter"]

log = structlog.get_logger("kopf_csi.snapshotter")
Body = Mapping[str, Any]


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _resource_version(obj: Body) -> int:
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


class ContentCache(Cache):
    """The content cache; an older version never replaces a newer one (`StoreObjectUpdate`):
    our own writes are stored at once, and their watch events may trail older ones."""

    def store(self, obj: Body) -> None:
        current = self.get(obj["metadata"]["name"])
        if current is not None and _resource_version(current) > _resource_version(obj):
            return
        super().store(obj)


class Snapshotter:
    """The sidecar's state and its operations on the VolumeSnapshotContents of one driver."""

    def __init__(
        self,
        *,
        csi_client: CSIClient,
        api: kube.KubeClient,
        recorder: events.Recorder,
        driver: DriverInfo,
        options: SnapshotterOptions,
    ) -> None:
        self.csi = csi_client
        self.api = api
        self.recorder = recorder
        self.driver = driver
        self.options = options
        self.contents = ContentCache()
        self.classes = Cache()
        self.deleted_on_driver: collections.OrderedDict[str, None] = collections.OrderedDict()
        """UIDs of contents whose DeleteSnapshot succeeded and whose writes are not done yet:
        a retry of those writes never deletes on the driver again."""
        self._seen: dict[str, Body] = {}

    # -- watch events --------------------------------------------------------------------------

    def is_ours(self, content: Body) -> bool:
        return decisions.is_driver_match(
            content, driver=self.driver.name, class_of=self.classes.get
        )

    def observe(self, content: Body, *, deleted: bool = False) -> bool:
        """A watch event of a content: whether it needs a sync (the informer's handlers)."""
        name = str(content["metadata"]["name"])
        if deleted:
            self.contents.remove(content)
            self._seen.pop(name, None)
            return False
        self.contents.store(content)
        if not self.is_ours(content):
            return False
        previous, self._seen[name] = self._seen.get(name), content
        return decisions.should_enqueue_change(previous, content)

    def unsettled(self) -> list[str]:
        """Contents of ours that are not ready or are being deleted (for the resync)."""
        return [
            str(c["metadata"]["name"])
            for c in self.contents
            if self.is_ours(c) and (decisions.is_deleting(c) or not decisions.is_ready(c))
        ]

    # -- the sync ------------------------------------------------------------------------------

    async def sync(self, name: str) -> Outcome:
        content = self.contents.get(name)
        if content is None or not self.is_ours(content):
            return DONE
        with logs.bound_object(content, kind="VolumeSnapshotContent"):
            return await self._dispatch(content)

    async def _dispatch(self, content: Body) -> Outcome:
        action = decisions.next_action(content)
        if action is decisions.Action.DELETE_SNAPSHOT:
            return await self._delete(content)
        if action is decisions.Action.RELEASE:
            return await self._release(content)
        if action is decisions.Action.READY:
            try:
                await self._remove_being_created(content)
            except SnapshotError as exc:
                log.warning("annotation_not_removed", error=exc.message)
                return RETRY
            return DONE
        if action is decisions.Action.CREATE:
            reason, template = (
                names.REASON_SNAPSHOT_CREATION_FAILED,
                names.MESSAGE_SNAPSHOT_CREATION_FAILED,
            )
        else:
            reason, template = (
                names.REASON_SNAPSHOT_CHECK_FAILED,
                names.MESSAGE_SNAPSHOT_CHECK_FAILED,
            )
        try:
            if action is decisions.Action.CREATE:
                updated = await self._create(content)
            else:
                updated = await self._check(content)
        except SnapshotError as exc:
            log.warning("snapshot_sync_failed", action=action.value, error=exc.message)
            failed = exc.content if exc.content is not None else content
            await self._save_error(failed, reason, template.format(error=exc.message))
            return RETRY
        if decisions.should_delete(updated):
            # Deleted while CreateSnapshot was running: go on with the deletion now (upstream
            # waits for the resync, as its update filter drops the annotation's removal).
            return await self._dispatch(updated)
        return DONE if decisions.is_ready(updated) else RETRY  # not ready: poll with backoff

    # -- create (and poll a dynamic one) -------------------------------------------------------

    async def _create(self, content: Body) -> Body:
        """`createSnapshotWrapper`."""
        name = str(content["metadata"]["name"])
        snapshot_class, secrets = await self._create_input(content)
        content = await self._set_being_created(content)
        try:
            params = parameters.driver_parameters(
                (snapshot_class or {}).get("parameters"),
                content=content,
                extra_create_metadata=self.options.extra_create_metadata,
            )
        except parameters.ParameterError as exc:
            raise SnapshotError(str(exc), content=content) from None
        volume = str(content["spec"]["source"]["volumeHandle"])
        try:
            answer = await self._call_create(content, volume, params, secrets)
        except (SnapshotError, CSIError) as exc:
            log.info("create_snapshot_failed", error=error_text(exc), final=is_final(exc))
            if is_final(exc):
                content = await self._remove_being_created(content, final=True)
            message = names.ERROR_SNAPSHOT_TAKE.format(volume=volume, quoted=quoted(exc))
            raise SnapshotError(message, content=content) from None
        created_ns = _nanoseconds(answer.creation_time)
        try:
            content = await self._save_status(
                content,
                handle=answer.snapshot_id,
                ready=bool(answer.ready_to_use),
                created_ns=created_ns,
                size=answer.size_bytes or 0,
            )
        except SnapshotError as exc:
            message = names.ERROR_SNAPSHOT_UPDATE_STATUS.format(content=name, error=exc.message)
            raise SnapshotError(message, content=content) from None
        log.info(
            "snapshot_created",
            snapshot_id=answer.snapshot_id,
            ready=bool(answer.ready_to_use),
            size=answer.size_bytes,
        )
        return await self._remove_being_created(content)

    async def _create_input(self, content: Body) -> tuple[Body | None, dict[str, str] | None]:
        """`getCSISnapshotInput`: the class, and the secret named by the content's annotations."""
        name = str(content["metadata"]["name"])
        try:
            snapshot_class = self._creation_class(content)
            secrets = await self._credentials_from_annotations(content)
        except SnapshotError as exc:
            message = names.ERROR_SNAPSHOT_INPUT.format(content=name, quoted=quoted(exc))
            raise SnapshotError(message, content=content) from None
        return snapshot_class, secrets

    def _creation_class(self, content: Body) -> Body | None:
        spec = content.get("spec") or {}
        class_name = spec.get("volumeSnapshotClassName")
        if class_name:
            snapshot_class = self.classes.get(str(class_name))
            if snapshot_class is None:
                raise SnapshotError(names.ERROR_SNAPSHOT_CLASS_NOT_FOUND.format(name=class_name))
            return snapshot_class
        if (spec.get("source") or {}).get("volumeHandle"):
            name = content["metadata"]["name"]
            raise SnapshotError(names.ERROR_SNAPSHOT_WITHOUT_CLASS.format(content=name))
        return None  # a pre-provisioned content needs no class

    async def _call_create(
        self,
        content: Body,
        volume: str,
        params: dict[str, str],
        secrets: dict[str, str] | None,
    ) -> csi.Snapshot:
        """`csiHandler.CreateSnapshot`: the name comes from the VolumeSnapshot's uid."""
        ref = (content.get("spec") or {}).get("volumeSnapshotRef") or {}
        if not ref.get("uid"):
            name = content["metadata"]["name"]
            raise SnapshotError(names.ERROR_SNAPSHOT_NOT_BOUND.format(content=name))
        request = csi.CreateSnapshotRequest(
            source_volume_id=volume,
            name=decisions.snapshot_name(
                self.options.snapshot_name_prefix,
                str(ref["uid"]),
                self.options.snapshot_name_uuid_length,
            ),
            parameters=params,
            secrets=secrets or {},
        )
        answer = await self.csi.create_snapshot(request, timeout=self.options.timeout)
        if answer.snapshot is None:  # a driver bug; Go would dereference nil here
            raise CSIError("CreateSnapshot returned no snapshot", method="", code=Code.INTERNAL)
        return answer.snapshot

    # -- check (poll) ----------------------------------------------------------------------------

    async def _check(self, content: Body) -> Body:
        """`checkandUpdateContentStatusOperation`: a pre-provisioned content asks the driver
        for its status; a dynamic one goes through CreateSnapshot again (idempotent by name)."""
        source = (content.get("spec") or {}).get("source") or {}
        if not source.get("snapshotHandle"):
            return await self._create(content)
        secrets = await self._list_secrets(content)
        ready, created_ns, size = await self._snapshot_status(content, secrets)
        handle = str(source["snapshotHandle"])
        return await self._save_status(
            content, handle=handle, ready=ready, created_ns=created_ns or time.time_ns(), size=size
        )

    async def _list_secrets(self, content: Body) -> dict[str, str] | None:
        name = str(content["metadata"]["name"])
        class_name = (content.get("spec") or {}).get("volumeSnapshotClassName")
        if not class_name:
            return None
        snapshot_class = self.classes.get(str(class_name))
        if snapshot_class is None:
            missing = names.ERROR_SNAPSHOT_CLASS_NOT_FOUND.format(name=class_name)
            raise SnapshotError(
                names.ERROR_SNAPSHOT_GET_CLASS.format(name=class_name, content=name, error=missing)
            )
        try:
            ref = parameters.secret_reference(
                parameters.LIST_SECRET, snapshot_class.get("parameters"), content_name=name
            )
        except parameters.ParameterError as exc:
            raise SnapshotError(
                names.ERROR_SNAPSHOT_SECRET_REFERENCE.format(content=name, error=exc)
            ) from None
        if ref is None:
            return None
        try:
            return await self._secret_data(ref.name, ref.namespace)
        except SnapshotError as exc:
            message = names.ERROR_SNAPSHOT_GET_CREDENTIALS.format(content=name, error=exc.message)
            raise SnapshotError(message) from None

    async def _snapshot_status(
        self, content: Body, secrets: dict[str, str] | None
    ) -> tuple[bool, int, int]:
        """`GetSnapshotStatus`: ready, creation time (ns, 0 if unknown), size."""
        name = str(content["metadata"]["name"])
        handle = decisions.snapshot_handle(content)
        if handle is None:
            raise SnapshotError(names.ERROR_SNAPSHOT_LIST_NO_HANDLE.format(content=name))
        try:
            found = await self._read_snapshot(handle, secrets)
        except (SnapshotError, CSIError) as exc:
            message = names.ERROR_SNAPSHOT_LIST.format(content=name, quoted=quoted(exc))
            raise SnapshotError(message) from None
        if found is None:  # the driver cannot tell: assume the handle is valid (upstream)
            return True, 0, 0
        return bool(found.ready_to_use), _nanoseconds(found.creation_time), found.size_bytes or 0

    async def _read_snapshot(
        self, handle: str, secrets: dict[str, str] | None
    ) -> csi.Snapshot | None:
        # Upstream asks for the capabilities before every status check: they may have changed
        # with a restarted driver.
        try:
            answer = await self.csi.controller_get_capabilities()
        except CSIError as exc:
            raise SnapshotError(
                names.ERROR_SNAPSHOT_LIST_SUPPORTED.format(error=error_text(exc))
            ) from None
        capabilities = {c.rpc.type.name for c in answer.capabilities if c.rpc is not None}
        not_found = names.ERROR_SNAPSHOT_NOT_FOUND.format(snapshot_id=handle)
        if self.options.use_get_snapshot and "GET_SNAPSHOT" in capabilities:
            request = csi.GetSnapshotRequest(snapshot_id=handle, secrets=secrets or {})
            try:
                got = await self.csi.get_snapshot(request, timeout=self.options.timeout)
            except CSIError as exc:
                if exc.code is Code.NOT_FOUND:
                    raise SnapshotError(not_found) from None
                raise
            if got.snapshot is None:
                raise SnapshotError(not_found)
            return got.snapshot
        if "LIST_SNAPSHOTS" not in capabilities:
            return None
        listed = await self.csi.list_snapshots(
            csi.ListSnapshotsRequest(snapshot_id=handle, secrets=secrets or {}),
            timeout=self.options.timeout,
        )
        for entry in listed.entries:
            if entry.snapshot is not None:
                return entry.snapshot
        raise SnapshotError(not_found)

    # -- delete and release ----------------------------------------------------------------------

    async def _delete(self, content: Body) -> Outcome:
        """`deleteCSISnapshotOperation`, then `removeContentFinalizer` at once."""
        uid = str(content["metadata"].get("uid", ""))
        if uid not in self.deleted_on_driver:
            outcome = await self._delete_on_driver(content)
            if outcome is not None:
                return outcome
            self.deleted_on_driver[uid] = None
            while len(self.deleted_on_driver) > DELETED_REMEMBERED:
                self.deleted_on_driver.popitem(last=False)
        try:
            cleared = await self._write(content, decisions.cleared_status_patch(), status=True)
        except SnapshotError as exc:
            log.warning("snapshot_status_not_cleared", error=exc.message)
            await self._event(
                content,
                names.REASON_SNAPSHOT_DELETE_ERROR,
                names.MESSAGE_SNAPSHOT_CLEAR_STATUS_FAILED,
            )
            return RETRY
        outcome = await self._release(cleared)
        if outcome == DONE:
            self.deleted_on_driver.pop(uid, None)
        return outcome

    async def _delete_on_driver(self, content: Body) -> Outcome | None:
        """DeleteSnapshot with the deletion secret; None when it succeeded, else the retry."""
        name = str(content["metadata"]["name"])
        try:
            secrets = await self._credentials_from_annotations(content)
        except SnapshotError as exc:
            log.warning("snapshot_delete_failed", error=exc.message)
            await self._event(
                content,
                names.REASON_SNAPSHOT_DELETE_ERROR,
                names.MESSAGE_SNAPSHOT_CREDENTIALS_FAILED,
            )
            return RETRY
        handle = decisions.snapshot_handle(content)
        try:
            await self._call_delete(name, handle, secrets)
        except (SnapshotError, CSIError) as exc:
            error = names.ERROR_SNAPSHOT_DELETE.format(content=name, quoted=quoted(exc))
            log.warning("snapshot_delete_failed", error=error)
            await self._event(
                content, names.REASON_SNAPSHOT_DELETE_ERROR, names.MESSAGE_SNAPSHOT_DELETE_FAILED
            )
            return RETRY
        log.info("snapshot_deleted", snapshot_id=handle)
        return None

    async def _call_delete(
        self, name: str, handle: str | None, secrets: dict[str, str] | None
    ) -> None:
        if handle is None:
            raise SnapshotError(names.ERROR_SNAPSHOT_DELETE_NO_HANDLE.format(content=name))
        request = csi.DeleteSnapshotRequest(snapshot_id=handle, secrets=secrets or {})
        await self.csi.delete_snapshot(request, timeout=self.options.timeout)

    async def _release(self, content: Body) -> Outcome:
        """`removeContentFinalizer`: only the bound-protection finalizer, nothing else.

        The patch tests the finalizers it was computed from; when the snapshot-controller (or
        anyone) changed them meanwhile, that is a lost race: the content is read again and the
        patch computed again, at once and quietly.
        """
        name = str(content["metadata"]["name"])
        policy = (content.get("spec") or {}).get("deletionPolicy")
        for attempt in range(1, kube.STALE_WRITE_ATTEMPTS + 1):
            patch = decisions.release_patch(content)
            if patch is None:
                return DONE
            try:
                updated = await self.api.patch(
                    kube.SNAPSHOT_CONTENTS, name, patch, patch_type="json"
                )
            except kube.NotFoundError:
                return DONE
            except kube.KubeError as exc:
                if (
                    not isinstance(exc, kube.StaleWriteError)
                    or attempt == kube.STALE_WRITE_ATTEMPTS
                ):
                    log.warning(
                        "content_not_released", error=controller_update_error(name, exc.message)
                    )
                    return RETRY
                log.debug("content_release_raced", error=str(exc))
            else:
                self.contents.store(updated)
                log.info("content_released", policy=policy)
                return DONE
            try:
                fresh = await self.api.get(kube.SNAPSHOT_CONTENTS, name)
            except kube.KubeError as exc:
                log.warning("content_not_released", error=str(exc))
                return RETRY
            if fresh is None:
                return DONE
            self.contents.store(fresh)
            content = fresh
        return RETRY  # not reached: the last attempt returns

    # -- writes ------------------------------------------------------------------------------------

    async def _write(
        self,
        content: Body,
        patch: Any,
        *,
        status: bool = False,
        patch_type: kube.PatchType = "merge",
    ) -> Body:
        name = str(content["metadata"]["name"])
        try:
            updated = await self.api.patch(
                kube.SNAPSHOT_CONTENTS,
                name,
                patch,
                patch_type=patch_type,
                subresource="status" if status else None,
            )
        except kube.KubeError as exc:
            raise SnapshotError(
                controller_update_error(name, exc.message), content=content
            ) from None
        self.contents.store(updated)
        return updated

    async def _set_being_created(self, content: Body) -> Body:
        if names.ANN_SNAPSHOT_BEING_CREATED in decisions.annotations_of(content):
            return content
        patch = {"metadata": {"annotations": {names.ANN_SNAPSHOT_BEING_CREATED: "yes"}}}
        try:
            return await self._write(content, patch)
        except SnapshotError as exc:
            message = names.ERROR_SNAPSHOT_SET_BEING_CREATED.format(
                content=content["metadata"]["name"], quoted=quoted(exc)
            )
            raise SnapshotError(message, content=content) from None

    async def _remove_being_created(self, content: Body, *, final: bool = False) -> Body:
        if names.ANN_SNAPSHOT_BEING_CREATED not in decisions.annotations_of(content):
            return content
        patch = {"metadata": {"annotations": {names.ANN_SNAPSHOT_BEING_CREATED: None}}}
        try:
            return await self._write(content, patch)
        except SnapshotError as exc:
            name = content["metadata"]["name"]
            if final:
                message = names.ERROR_SNAPSHOT_REMOVE_BEING_CREATED_FINAL.format(
                    content=name, error=exc.message
                )
            else:
                message = names.ERROR_SNAPSHOT_REMOVE_BEING_CREATED.format(
                    content=name, quoted=quoted(exc)
                )
            raise SnapshotError(message, content=content) from None

    async def _save_status(
        self, content: Body, *, handle: str, ready: bool, created_ns: int, size: int
    ) -> Body:
        """`updateSnapshotContentStatus`: read the content from the API, fill in its status."""
        name = str(content["metadata"]["name"])
        try:
            fresh = await self.api.get(kube.SNAPSHOT_CONTENTS, name)
        except kube.KubeError as exc:
            error = exc.message
        else:
            error = f'volumesnapshotcontents.snapshot.storage.k8s.io "{name}" not found'
        if fresh is None:
            message = names.ERROR_SNAPSHOT_GET_CONTENT.format(content=name, error=error)
            raise SnapshotError(message, content=content)
        self.contents.store(fresh)
        status = decisions.updated_status(
            fresh.get("status"),
            handle=handle,
            ready=ready,
            created_ns=created_ns or time.time_ns(),
            size=size,
        )
        if status is None:
            return fresh
        patch = [{"op": "add", "path": "/status", "value": status}]
        return await self._write(fresh, patch, status=True, patch_type="json")

    async def _save_error(self, content: Body, reason: str, message: str) -> None:
        """`updateContentErrorStatusWithEvent`: the error into the status, and an event, once
        per distinct message; the event is posted even when the status write fails."""
        patch = decisions.error_status_patch(content, message, _now())
        if patch is None:
            return
        try:
            content = await self._write(content, patch, status=True)
        except SnapshotError as exc:
            log.warning("error_status_not_saved", error=exc.message)
        await self._event(content, reason, message)

    async def _event(self, content: Body, reason: str, message: str) -> None:
        await self.recorder.post(content, type_=events.WARNING, reason=reason, message=message)

    # -- secrets -----------------------------------------------------------------------------------

    async def _credentials_from_annotations(self, content: Body) -> dict[str, str] | None:
        """`GetCredentialsFromAnnotation`: the secret the snapshot-controller resolved from the
        class's `snapshotter-secret-*` templates and wrote on the content."""
        annotations = decisions.annotations_of(content)
        keys = (
            names.ANN_SNAPSHOT_DELETION_SECRET_NAME,
            names.ANN_SNAPSHOT_DELETION_SECRET_NAMESPACE,
        )
        if not all(key in annotations for key in keys):
            return None
        name, namespace = annotations[keys[0]], annotations[keys[1]]
        content_name = go_quote(str(content["metadata"]["name"]))
        if not name or not namespace:
            raise SnapshotError(names.ERROR_SNAPSHOT_SECRET_UNSPECIFIED.format(quoted=content_name))
        try:
            return await self._secret_data(name, namespace)
        except SnapshotError as exc:
            log.warning("snapshot_credentials_failed", error=exc.message)
            raise SnapshotError(
                names.ERROR_SNAPSHOT_CREDENTIALS.format(quoted=content_name)
            ) from None

    async def _secret_data(self, name: str, namespace: str) -> dict[str, str]:
        """`GetCredentials`: the secret's data, decoded (never logged)."""
        try:
            secret = await self.api.get(kube.SECRETS, name, namespace)
        except kube.KubeError as exc:
            secret, error = None, exc.message
        else:
            error = f'secrets "{name}" not found'
        if secret is not None:
            try:
                return kube.decode_secret_data(secret)
            except ValueError as exc:
                error = str(exc)
        message = names.ERROR_SNAPSHOT_GET_SECRET.format(
            name=name, namespace=namespace, error=error
        )
        raise SnapshotError(message)


def _nanoseconds(when: datetime.datetime | None) -> int:
    """A CSI creation time in Unix nanoseconds (the VSC's `creationTime`); 0 when unset."""
    if when is None:
        return 0
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    delta = when - datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1_000
