"""What the two content controllers of the csi-snapshotter share: the caches, the watch-event
filter, the writes, the being-created annotation, the status write (read from the API, guarded
by its resourceVersion, retried at once on a lost race), the delete on the driver, the finalizer
release, the error status, the class, and the secrets named by a content's annotations or by
its class.

`Snapshotter` (VolumeSnapshotContents, `operations`) and `GroupSnapshotter`
(VolumeGroupSnapshotContents, `group_operations`) are the two subclasses; they differ in their
resource, their annotation, finalizer and class keys and their Go texts (`Texts`,
`DeleteEvents`), in what they ask of the driver, and in how its answer fills the status.
Upstream has the same pairs of functions, once per kind (`setAnnVolumeSnapshotBeingCreated`
and `setAnnVolumeGroupSnapshotBeingCreated`, ...).
"""

from __future__ import annotations

import abc
import collections
import dataclasses
import datetime
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import structlog

from kopf_csi import events, kube, logs, names
from kopf_csi.caches import Cache
from kopf_csi.csi import CSIClient, CSIError, DriverInfo
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

__all__ = [
    "ContentCache",
    "ContentController",
    "DeleteEvents",
    "Texts",
    "now_rfc3339",
    "read_secret",
]

log = structlog.get_logger("kopf_csi.snapshotter")

DELETED_REMEMBERED = 10_000
Body = Mapping[str, Any]


def now_rfc3339() -> str:
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


@dataclasses.dataclass(frozen=True)
class Texts:
    """One kind's Go error texts around the annotations, the class, the secrets and the status
    (`names` templates)."""

    set_being_created: str
    remove_being_created_final: str
    remove_being_created: str
    secret_unspecified: str
    credentials: str
    update_status: str
    """The create's failed status write (`{content}`, `{error}`)."""
    get_content: str
    """The content could not be read before a status write (`{content}`, `{error}`)."""
    class_not_found: str
    """The class is not in the cache (`{name}`)."""
    get_class: str
    """The class of a status check is unusable (`{name}`, `{content}`, `{error}`)."""
    secret_reference: str
    """The class's secret parameters are unusable (`{content}`, `{error}`)."""
    get_credentials: str
    """The class's secret could not be read (`{content}`, `{error}`)."""


@dataclasses.dataclass(frozen=True)
class DeleteEvents:
    """One kind's Warning events of a failed delete on the driver, and its log lines."""

    reason: str
    credentials_failed: str
    delete_failed: str
    failed_log: str
    deleted_log: str


def _warn(event: str, exc: BaseException, **fields: Any) -> None:
    """A failure's line: a warning, or debug when it was the API server being away (the
    outage is told once, by the client: `kube.reachability`)."""
    fields.setdefault("error", getattr(exc, "message", str(exc)))
    (log.debug if kube.is_unavailable(exc) else log.warning)(event, **fields)


async def read_secret(api: kube.KubeClient, name: str, namespace: str) -> dict[str, str]:
    """`GetCredentials`: the secret's data, decoded (never logged)."""
    cause: Exception
    try:
        secret = await api.read(kube.SECRETS, name, namespace)
        return kube.decode_secret_data(secret)
    except kube.KubeError as exc:  # the server's own text, as client-go's error prints
        error, cause = exc.message, exc
    except ValueError as exc:
        error, cause = str(exc), exc
    message = names.ERROR_SNAPSHOT_GET_SECRET.format(name=name, namespace=namespace, error=error)
    raise SnapshotError(message) from cause  # an outage stays one (`kube.is_unavailable`)


class ContentController(abc.ABC):
    """The sidecar's state and shared steps for one kind of content of one driver."""

    resource: ClassVar[kube.Resource]
    kind: ClassVar[str]
    being_created: ClassVar[str]
    """The being-created annotation key."""
    finalizer: ClassVar[str]
    """The bound-protection finalizer the release removes."""
    secret_annotations: ClassVar[tuple[str, str]]
    """The annotations naming the secret of the create and delete calls: name, namespace."""
    class_field: ClassVar[str]
    """The spec field naming the content's class."""
    status_secret: ClassVar[parameters.SecretKind]
    """The class's secret of a status check of a pre-provisioned content."""
    secret_token: ClassVar[str]
    """The stem of that secret's template tokens (`parameters.secret_reference`)."""
    texts: ClassVar[Texts]
    delete_events: ClassVar[DeleteEvents]
    create_failed: ClassVar[tuple[str, str]]
    """The event reason and message template of a failed create (`{error}`)."""
    check_failed: ClassVar[tuple[str, str]]
    """The same for a failed check of a content that is not ready."""
    cleared_status: ClassVar[Mapping[str, Any]]
    """The status patch written once the driver deleted the snapshot(s)."""
    clear_failed: ClassVar[tuple[str, str]]
    """The event reason and message when that status write fails."""

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
        self._seen: dict[str, Body] = {}
        self.deleted_on_driver: collections.OrderedDict[str, None] = collections.OrderedDict()
        """UIDs of contents whose delete on the driver succeeded and whose writes are not done
        yet: a retry of those writes never deletes on the driver again."""

    @abc.abstractmethod
    def is_ours(self, content: Body) -> bool: ...

    @abc.abstractmethod
    def is_ready(self, content: Body) -> bool: ...

    @abc.abstractmethod
    def next_action(self, content: Body) -> decisions.Action: ...

    @abc.abstractmethod
    def should_delete(self, content: Body) -> bool: ...

    @abc.abstractmethod
    async def _create_input(self, content: Body) -> tuple[Body | None, dict[str, str] | None]:
        """The class (None for a pre-provisioned content) and the secret of the create."""

    @abc.abstractmethod
    def _parameters(self, content: Body, cls: Body | None) -> dict[str, str]:
        """The create's parameters (`parameters.ParameterError` if unusable)."""

    @abc.abstractmethod
    async def _call_create(
        self, content: Body, params: dict[str, str], secrets: dict[str, str] | None
    ) -> Any:
        """The CSI create call (the handler's part): its answer."""

    @abc.abstractmethod
    def _take_error(self, content: Body, error: BaseException) -> str:
        """The error text of a failed create call."""

    @abc.abstractmethod
    async def _save_created(self, content: Body, answer: Any) -> Body:
        """The answer into the content's status."""

    @abc.abstractmethod
    async def _check(self, content: Body) -> Body: ...

    @abc.abstractmethod
    async def _call_delete(self, content: Body, secrets: dict[str, str] | None) -> dict[str, Any]:
        """The CSI delete call: the fields of its success log line."""

    @abc.abstractmethod
    def _delete_error(self, name: str, error: BaseException) -> str:
        """The error text of a failed delete call."""

    # -- watch events --------------------------------------------------------------------------

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
        return decisions.should_enqueue_change(previous, content, own=self.being_created)

    def unsettled(self) -> list[str]:
        """Contents of ours that are not ready or are being deleted (for the resync)."""
        return [
            str(c["metadata"]["name"])
            for c in self.contents
            if self.is_ours(c) and (decisions.is_deleting(c) or not self.is_ready(c))
        ]

    async def sync(self, name: str) -> Outcome:
        content = self.contents.get(name)
        if content is None or not self.is_ours(content):
            return DONE
        with logs.bound_object(content, kind=self.kind):
            return await self._dispatch(content)

    async def _dispatch(self, content: Body) -> Outcome:
        """`syncContent` / `syncGroupSnapshotContent`."""
        action = self.next_action(content)
        if action is decisions.Action.DELETE_SNAPSHOT:
            return await self._delete(content)
        if action is decisions.Action.RELEASE:
            return await self._release(content)
        if action is decisions.Action.READY:
            try:  # nothing to call; only a left-over being-created annotation to remove
                await self._remove_being_created(content)
            except SnapshotError as exc:
                _warn("annotation_not_removed", exc)
                return RETRY
            return DONE
        creating = action is decisions.Action.CREATE
        reason, template = self.create_failed if creating else self.check_failed
        try:
            updated = await (self._create(content) if creating else self._check(content))
        except SnapshotError as exc:
            if kube.is_unavailable(exc):  # told once, by the client; no status error for it
                log.debug("snapshot_sync_failed", action=action.value, error=exc.message)
                return RETRY
            log.warning("snapshot_sync_failed", action=action.value, error=exc.message)
            failed = exc.content if exc.content is not None else content
            await self._save_error(failed, reason, template.format(error=exc.message))
            return RETRY
        if self.should_delete(updated):
            # Deleted while the create was running: go on with the deletion now (upstream
            # waits for the resync, as its update filter drops the annotation's removal).
            return await self._dispatch(updated)
        return DONE if self.is_ready(updated) else RETRY  # not ready: poll with backoff

    async def _create(self, content: Body) -> Body:
        """`createSnapshotWrapper` / `createGroupSnapshotWrapper`: the being-created annotation
        before the call, removed after the status is saved or after a final error."""
        name = str(content["metadata"]["name"])
        cls, secrets = await self._create_input(content)
        content = await self._set_being_created(content)
        try:
            params = self._parameters(content, cls)
        except parameters.ParameterError as exc:
            raise SnapshotError(str(exc), content=content) from None
        try:
            answer = await self._call_create(content, params, secrets)
        except (SnapshotError, CSIError) as exc:
            log.info("create_failed", error=error_text(exc), final=is_final(exc))
            if is_final(exc):
                content = await self._remove_being_created(content, final=True)
            raise SnapshotError(self._take_error(content, exc), content=content) from exc
        try:
            content = await self._save_created(content, answer)
        except SnapshotError as exc:
            message = self.texts.update_status.format(content=name, error=exc.message)
            raise SnapshotError(message, content=content) from exc
        return await self._remove_being_created(content)

    # -- writes ----------------------------------------------------------------------------------

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
                self.resource,
                name,
                patch,
                patch_type=patch_type,
                subresource="status" if status else None,
            )
        except kube.KubeError as exc:
            raise SnapshotError(
                controller_update_error(name, exc.message), content=content
            ) from exc
        self.contents.store(updated)
        return updated

    async def _set_being_created(self, content: Body) -> Body:
        if self.being_created in decisions.annotations_of(content):
            return content
        patch = {"metadata": {"annotations": {self.being_created: "yes"}}}
        try:
            return await self._write(content, patch)
        except SnapshotError as exc:
            message = self.texts.set_being_created.format(
                content=content["metadata"]["name"], quoted=quoted(exc)
            )
            raise SnapshotError(message, content=content) from exc

    async def _remove_being_created(self, content: Body, *, final: bool = False) -> Body:
        if self.being_created not in decisions.annotations_of(content):
            return content
        patch = {"metadata": {"annotations": {self.being_created: None}}}
        try:
            return await self._write(content, patch)
        except SnapshotError as exc:
            name = content["metadata"]["name"]
            if final:
                message = self.texts.remove_being_created_final.format(
                    content=name, error=exc.message
                )
            else:
                message = self.texts.remove_being_created.format(content=name, quoted=quoted(exc))
            raise SnapshotError(message, content=content) from exc

    async def _delete(self, content: Body) -> Outcome:
        """`deleteCSI*SnapshotOperation`: delete on the driver, clear the status, release.

        A retry after the driver's delete succeeded skips it (by uid), whatever failed after.
        """
        uid = str(content["metadata"].get("uid", ""))
        if uid not in self.deleted_on_driver:
            outcome = await self._delete_on_driver(content)
            if outcome is not None:
                return outcome
            self.deleted_on_driver[uid] = None
            while len(self.deleted_on_driver) > DELETED_REMEMBERED:
                self.deleted_on_driver.popitem(last=False)
        try:
            content = await self._write(content, dict(self.cleared_status), status=True)
        except SnapshotError as exc:
            _warn("content_status_not_cleared", exc)
            await self._event(content, *self.clear_failed)
            return RETRY
        outcome = await self._release(content)
        if outcome == DONE:
            self.deleted_on_driver.pop(uid, None)
        return outcome

    async def _delete_on_driver(self, content: Body) -> Outcome | None:
        """The delete on the driver, with the secret of the content's annotations: None when
        it succeeded, else the retry (the event posted)."""
        name = str(content["metadata"]["name"])
        failed_log = self.delete_events.failed_log
        try:
            secrets = await self._credentials_from_annotations(content)
        except SnapshotError as exc:
            if kube.is_unavailable(exc):
                log.debug(failed_log, error=exc.message)
                return RETRY
            log.warning(failed_log, error=exc.message)
            reason, message = self.delete_events.reason, self.delete_events.credentials_failed
            await self._event(content, reason, message)
            return RETRY
        try:
            fields = await self._call_delete(content, secrets)
        except (SnapshotError, CSIError) as exc:
            if kube.is_unavailable(exc):
                log.debug(failed_log, error=self._delete_error(name, exc))
                return RETRY
            log.warning(failed_log, error=self._delete_error(name, exc))
            await self._event(content, self.delete_events.reason, self.delete_events.delete_failed)
            return RETRY
        log.info(self.delete_events.deleted_log, **fields)
        return None

    async def _release(self, content: Body) -> Outcome:
        """`removeContentFinalizer`: only the bound-protection finalizer, nothing else.

        The patch carries the resourceVersion it was computed from; when the
        snapshot-controller (or anyone) wrote the content meanwhile (409), that is a lost race:
        the content is read again and the patch computed again, at once and quietly.
        """
        name = str(content["metadata"]["name"])
        released = False

        async def write(current: Body) -> Body:
            nonlocal released
            patch = decisions.release_patch(current, finalizer=self.finalizer)
            if patch is None:
                return current
            updated = await self.api.patch(self.resource, name, kube.guarded_patch(current, patch))
            self.contents.store(updated)
            released = True
            return updated

        async def read() -> Body | None:
            log.debug("content_release_raced", content=name)
            fresh = await self.api.get(self.resource, name)
            if fresh is not None:
                self.contents.store(fresh)
            return fresh

        try:
            await kube.retry_on_conflict(write, content, read=read)
        except kube.NotFoundError:
            return DONE
        except kube.StaleWriteError as exc:  # every fresh read lost too: the queue tries later
            log.debug("content_release_raced", content=name, error=str(exc))
            return RETRY
        except kube.KubeError as exc:
            _warn("content_not_released", exc, error=controller_update_error(name, exc.message))
            return RETRY
        if released:
            log.info("content_released", policy=(content.get("spec") or {}).get("deletionPolicy"))
        return DONE

    async def _save_status(
        self, content: Body, status_of: Callable[[Body | None], dict[str, Any] | None]
    ) -> Body:
        """`update*ContentStatus`: read the content from the API, fill in its status
        (`status_of(current status)`: the new one, None when nothing changes).

        The write is guarded by the resourceVersion it was computed from. A 409 means that
        someone wrote first: read again and retry at once, quietly (the driver's answer is in
        hand; failing here would call the driver again for work that already succeeded).
        """
        name = str(content["metadata"]["name"])

        async def write(fresh: Body) -> Body:
            status = status_of(fresh.get("status"))
            if status is None:
                return fresh
            # A merge patch: what the new status no longer has goes explicitly (null).
            dropped = {key: None for key in fresh.get("status") or {} if key not in status}
            patch = kube.guarded_patch(fresh, {"status": {**status, **dropped}})
            updated = await self.api.patch(self.resource, name, patch, subresource="status")
            self.contents.store(updated)
            return updated

        async def read() -> Body:
            log.debug("content_status_raced", content=name)
            return await self._read(content)

        try:
            return await kube.retry_on_conflict(write, await self._read(content), read=read)
        except kube.KubeError as exc:
            raise SnapshotError(
                controller_update_error(name, exc.message), content=content
            ) from exc

    async def _read(self, content: Body) -> Body:
        """The content from the API (not the cache), as upstream reads it before a status
        write; the server's error text when that fails."""
        name = str(content["metadata"]["name"])
        try:
            fresh = await self.api.read(self.resource, name)
        except kube.KubeError as exc:
            message = self.texts.get_content.format(content=name, error=exc.message)
            raise SnapshotError(message, content=content) from exc
        self.contents.store(fresh)
        return fresh

    async def _save_error(self, content: Body, reason: str, message: str) -> None:
        """`update*ErrorStatusWithEvent`: the error into the status, and an event, once per
        distinct message; the event is posted even when the status write fails."""
        patch = decisions.error_status_patch(content, message, now_rfc3339())
        if patch is None:
            return
        try:
            content = await self._write(content, patch, status=True)
        except SnapshotError as exc:
            _warn("error_status_not_saved", exc)
        await self._event(content, reason, message)

    async def _event(self, content: Body, reason: str, message: str) -> None:
        await self.recorder.post(content, type_=events.WARNING, reason=reason, message=message)

    # -- the class and the secrets -----------------------------------------------------------------

    def _class_of(self, content: Body, *, unnamed: str | None = None) -> Body | None:
        """The class the content names, from the cache; with none named, the error `unnamed`
        if given (a dynamic content needs one), else None."""
        class_name = (content.get("spec") or {}).get(self.class_field)
        if class_name:
            found = self.classes.get(str(class_name))
            if found is None:
                raise SnapshotError(self.texts.class_not_found.format(name=class_name))
            return found
        if unnamed is not None:
            raise SnapshotError(unnamed)
        return None

    async def _class_secrets(self, content: Body) -> dict[str, str] | None:
        """The secret the content's class names for a status check (`status_secret`), if it
        names a class and the class a secret."""
        name = str(content["metadata"]["name"])
        class_name = (content.get("spec") or {}).get(self.class_field)
        if not class_name:
            return None
        try:
            found = self._class_of(content)
        except SnapshotError as exc:
            message = self.texts.get_class.format(name=class_name, content=name, error=exc.message)
            raise SnapshotError(message) from exc
        try:
            ref = parameters.secret_reference(
                self.status_secret,
                (found or {}).get("parameters"),
                content_name=name,
                token=self.secret_token,
            )
        except parameters.ParameterError as exc:
            raise SnapshotError(
                self.texts.secret_reference.format(content=name, error=exc)
            ) from None
        if ref is None:
            return None
        try:
            return await read_secret(self.api, ref.name, ref.namespace)
        except SnapshotError as exc:
            message = self.texts.get_credentials.format(content=name, error=exc.message)
            raise SnapshotError(message) from exc

    async def _credentials_from_annotations(self, content: Body) -> dict[str, str] | None:
        """`GetCredentialsFromAnnotation`: the secret the snapshot-controller resolved from the
        class's secret templates and wrote on the content."""
        annotations = decisions.annotations_of(content)
        name_key, namespace_key = self.secret_annotations
        if name_key not in annotations or namespace_key not in annotations:
            return None
        name, namespace = annotations[name_key], annotations[namespace_key]
        content_name = go_quote(str(content["metadata"]["name"]))
        if not name or not namespace:
            raise SnapshotError(self.texts.secret_unspecified.format(quoted=content_name))
        try:
            return await read_secret(self.api, name, namespace)
        except SnapshotError as exc:
            log.warning("snapshot_credentials_failed", error=exc.message)
            raise SnapshotError(self.texts.credentials.format(quoted=content_name)) from exc
