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

import datetime
import functools
import time
from collections.abc import Mapping
from typing import Any

import structlog

from kopf_csi import kube, names
from kopf_csi.csi import Code, CSIError
from kopf_csi.csi import messages as csi
from kopf_csi.snapshotting import decisions, parameters
from kopf_csi.snapshotting.contents import ContentCache, ContentController, DeleteEvents, Texts
from kopf_csi.snapshotting.errors import SnapshotError, error_text, quoted

__all__ = ["ContentCache", "Snapshotter", "nanoseconds"]

log = structlog.get_logger("kopf_csi.snapshotter")
Body = Mapping[str, Any]


class Snapshotter(ContentController):
    """The sidecar's operations on the VolumeSnapshotContents of one driver."""

    resource = kube.SNAPSHOT_CONTENTS
    kind = "VolumeSnapshotContent"
    being_created = names.ANN_SNAPSHOT_BEING_CREATED
    finalizer = names.FINALIZER_SNAPSHOT_CONTENT_BOUND
    secret_annotations = (
        names.ANN_SNAPSHOT_DELETION_SECRET_NAME,
        names.ANN_SNAPSHOT_DELETION_SECRET_NAMESPACE,
    )
    class_field = "volumeSnapshotClassName"
    status_secret = parameters.LIST_SECRET
    secret_token = "volumesnapshot"
    texts = Texts(
        set_being_created=names.ERROR_SNAPSHOT_SET_BEING_CREATED,
        remove_being_created_final=names.ERROR_SNAPSHOT_REMOVE_BEING_CREATED_FINAL,
        remove_being_created=names.ERROR_SNAPSHOT_REMOVE_BEING_CREATED,
        secret_unspecified=names.ERROR_SNAPSHOT_SECRET_UNSPECIFIED,
        credentials=names.ERROR_SNAPSHOT_CREDENTIALS,
        update_status=names.ERROR_SNAPSHOT_UPDATE_STATUS,
        get_content=names.ERROR_SNAPSHOT_GET_CONTENT,
        class_not_found=names.ERROR_SNAPSHOT_CLASS_NOT_FOUND,
        get_class=names.ERROR_SNAPSHOT_GET_CLASS,
        secret_reference=names.ERROR_SNAPSHOT_SECRET_REFERENCE,
        get_credentials=names.ERROR_SNAPSHOT_GET_CREDENTIALS,
    )
    delete_events = DeleteEvents(
        reason=names.REASON_SNAPSHOT_DELETE_ERROR,
        credentials_failed=names.MESSAGE_SNAPSHOT_CREDENTIALS_FAILED,
        delete_failed=names.MESSAGE_SNAPSHOT_DELETE_FAILED,
        failed_log="snapshot_delete_failed",
        deleted_log="snapshot_deleted",
    )

    def is_ours(self, content: Body) -> bool:
        return decisions.is_driver_match(
            content, driver=self.driver.name, class_of=self.classes.get
        )

    create_failed = (names.REASON_SNAPSHOT_CREATION_FAILED, names.MESSAGE_SNAPSHOT_CREATION_FAILED)
    check_failed = (names.REASON_SNAPSHOT_CHECK_FAILED, names.MESSAGE_SNAPSHOT_CHECK_FAILED)
    cleared_status = decisions.cleared_status_patch()
    clear_failed = (names.REASON_SNAPSHOT_DELETE_ERROR, names.MESSAGE_SNAPSHOT_CLEAR_STATUS_FAILED)

    def is_ready(self, content: Body) -> bool:
        return decisions.is_ready(content)

    def next_action(self, content: Body) -> decisions.Action:
        return decisions.next_action(content)

    def should_delete(self, content: Body) -> bool:
        return decisions.should_delete(content)

    # -- create (and poll a dynamic one) -------------------------------------------------------

    def _parameters(self, content: Body, cls: Body | None) -> dict[str, str]:
        return parameters.driver_parameters(
            (cls or {}).get("parameters"),
            content=content,
            extra_create_metadata=self.options.extra_create_metadata,
        )

    def _take_error(self, content: Body, error: BaseException) -> str:
        volume = str(content["spec"]["source"]["volumeHandle"])
        return names.ERROR_SNAPSHOT_TAKE.format(volume=volume, quoted=quoted(error))

    async def _save_created(self, content: Body, answer: csi.Snapshot) -> Body:
        content = await self._save_snapshot(content, answer.snapshot_id, answer)
        log.info(
            "snapshot_created",
            snapshot_id=answer.snapshot_id,
            ready=bool(answer.ready_to_use),
            size=answer.size_bytes,
        )
        return content

    async def _create_input(self, content: Body) -> tuple[Body | None, dict[str, str] | None]:
        """`getCSISnapshotInput`: the class, and the secret named by the content's annotations."""
        name = str(content["metadata"]["name"])
        try:
            snapshot_class = self._creation_class(content)
            secrets = await self._credentials_from_annotations(content)
        except SnapshotError as exc:
            message = names.ERROR_SNAPSHOT_INPUT.format(content=name, quoted=quoted(exc))
            raise SnapshotError(message, content=content) from exc
        return snapshot_class, secrets

    def _creation_class(self, content: Body) -> Body | None:
        """A dynamic snapshot needs its class; a pre-provisioned one, or a group member, not."""
        dynamic = decisions.source_of(content).get("volumeHandle")
        unnamed = None
        if dynamic and not decisions.is_group_member(content):
            name = content["metadata"]["name"]
            unnamed = names.ERROR_SNAPSHOT_WITHOUT_CLASS.format(content=name)
        return self._class_of(content, unnamed=unnamed)

    async def _call_create(
        self, content: Body, params: dict[str, str], secrets: dict[str, str] | None
    ) -> csi.Snapshot:
        """`csiHandler.CreateSnapshot`: the name comes from the VolumeSnapshot's uid."""
        volume = str(content["spec"]["source"]["volumeHandle"])
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
        """`checkandUpdateContentStatusOperation`: a pre-provisioned content, or a group
        member whose status names its snapshot, asks the driver for its status; a dynamic one
        goes through CreateSnapshot again (idempotent by name); a group member without that
        status waits for the snapshot-controller to write it (nothing to call, nothing to
        write: the member is the snapshot-controller's)."""
        source = (content.get("spec") or {}).get("source") or {}
        member_handle = decisions.member_status_handle(content)
        if not source.get("snapshotHandle") and member_handle is None:
            if decisions.is_group_member(content):
                return content
            return await self._create(content)
        secrets = await self._class_secrets(content)
        if member_handle is not None:  # a member has no class: its secret is annotated
            secrets = await self._member_secrets(content)
        found = await self._snapshot_status(content, secrets)
        handle = str(source.get("snapshotHandle") or member_handle)
        return await self._save_snapshot(content, handle, found)

    async def _member_secrets(self, content: Body) -> dict[str, str] | None:
        try:
            return await self._credentials_from_annotations(content)
        except SnapshotError as exc:
            name = str(content["metadata"]["name"])
            message = names.ERROR_SNAPSHOT_MEMBER_CREDENTIALS.format(
                content=name, error=exc.message
            )
            raise SnapshotError(message) from exc

    async def _snapshot_status(
        self, content: Body, secrets: dict[str, str] | None
    ) -> csi.Snapshot | None:
        """`GetSnapshotStatus`: the driver's snapshot; None when the driver cannot tell (then
        the handle is assumed valid and ready, as upstream does)."""
        name = str(content["metadata"]["name"])
        handle = decisions.snapshot_handle(content)
        if handle is None:
            raise SnapshotError(names.ERROR_SNAPSHOT_LIST_NO_HANDLE.format(content=name))
        try:
            return await self._read_snapshot(handle, secrets)
        except (SnapshotError, CSIError) as exc:
            message = names.ERROR_SNAPSHOT_LIST.format(content=name, quoted=quoted(exc))
            raise SnapshotError(message) from exc

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
            ) from exc
        capabilities = {c.rpc.type.name for c in answer.capabilities if c.rpc is not None}
        not_found = names.ERROR_SNAPSHOT_NOT_FOUND.format(snapshot_id=handle)
        if self.options.use_get_snapshot and "GET_SNAPSHOT" in capabilities:
            request = csi.GetSnapshotRequest(snapshot_id=handle, secrets=secrets or {})
            try:
                got = await self.csi.get_snapshot(request, timeout=self.options.timeout)
            except CSIError as exc:
                if exc.code is Code.NOT_FOUND:
                    raise SnapshotError(not_found) from exc
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

    async def _call_delete(self, content: Body, secrets: dict[str, str] | None) -> dict[str, Any]:
        """`csiHandler.DeleteSnapshot`."""
        handle = decisions.snapshot_handle(content)
        if handle is None:
            name = content["metadata"]["name"]
            raise SnapshotError(names.ERROR_SNAPSHOT_DELETE_NO_HANDLE.format(content=name))
        request = csi.DeleteSnapshotRequest(snapshot_id=handle, secrets=secrets or {})
        await self.csi.delete_snapshot(request, timeout=self.options.timeout)
        return {"snapshot_id": handle}

    def _delete_error(self, name: str, error: BaseException) -> str:
        return names.ERROR_SNAPSHOT_DELETE.format(content=name, quoted=quoted(error))

    # -- writes ------------------------------------------------------------------------------------

    async def _save_snapshot(self, content: Body, handle: str, found: csi.Snapshot | None) -> Body:
        """`updateSnapshotContentStatus`: the driver's snapshot into the content's status (an
        unknown creation time is now, as upstream's zero time)."""
        ready = True if found is None else bool(found.ready_to_use)
        created_ns = 0 if found is None else nanoseconds(found.creation_time)
        size = 0 if found is None else found.size_bytes or 0
        group = "" if found is None else found.group_snapshot_id
        return await self._save_status(
            content,
            functools.partial(
                decisions.updated_status,
                handle=handle,
                ready=ready,
                created_ns=created_ns or time.time_ns(),
                size=size,
                group_handle=group,
            ),
        )


def nanoseconds(when: datetime.datetime | None) -> int:
    """A CSI creation time in Unix nanoseconds (the VSC's `creationTime`); 0 when unset."""
    if when is None:
        return 0
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    delta = when - datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1_000
