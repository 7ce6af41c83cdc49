"""The csi-snapshotter's group operations: create, poll, delete and release
VolumeGroupSnapshotContents of our driver.

Async orchestration only, the port of external-snapshotter's group side of
`csiSnapshotSideCarController` (`syncGroupSnapshotContent` and what it calls, in
pkg/sidecar-controller/groupsnapshot_helper.go) and its `csiHandler` group methods. Each step
reads (the group content and class caches; the API for secrets and for the content before a
status write), decides with `groups`/`parameters`, calls the driver, writes. `sync(name)`
returns a `queueing.Outcome`; the work queue (`handlers/groupsnapshotter.py`) retries failures
and polls a group that is not ready, with the per-content backoff.

As for single snapshots, the being-created annotation is the leak protection: saved before
CreateVolumeGroupSnapshot, removed only after the status holds the group handle, or after a
final error; while it is there, a deleted content is not released. The member
VolumeSnapshotContents are the snapshot-controller's to make from `volumeSnapshotInfoList`, and
are deleted on the driver only through DeleteVolumeGroupSnapshot, never one by one (the
single-snapshot controller only releases a content whose status names a group).
"""

from __future__ import annotations

import datetime
import functools
from collections.abc import Mapping
from typing import Any

import structlog

from kopf_csi import kube, names
from kopf_csi.csi import Code, CSIError
from kopf_csi.csi import messages as csi
from kopf_csi.provisioning.gofmt import go_list, go_quote
from kopf_csi.snapshotting import groups, parameters
from kopf_csi.snapshotting.contents import ContentController, DeleteEvents, Texts, now_rfc3339
from kopf_csi.snapshotting.errors import SnapshotError, error_text, quoted
from kopf_csi.snapshotting.operations import nanoseconds

__all__ = ["GroupSnapshotter"]

log = structlog.get_logger("kopf_csi.snapshotter")
Body = Mapping[str, Any]


def _rfc3339(when: datetime.datetime | None) -> str:
    if when is None:
        return now_rfc3339()
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return when.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _members(answer: csi.VolumeGroupSnapshot) -> list[groups.Member]:
    return [
        groups.Member(
            volume=s.source_volume_id,
            snapshot=s.snapshot_id,
            ready=bool(s.ready_to_use),
            size=s.size_bytes or 0,
            created_ns=nanoseconds(s.creation_time),
        )
        for s in answer.snapshots
    ]


class GroupSnapshotter(ContentController):
    """The sidecar's operations on the VolumeGroupSnapshotContents of one driver."""

    resource = kube.GROUP_SNAPSHOT_CONTENTS
    kind = "VolumeGroupSnapshotContent"
    being_created = names.ANN_GROUP_SNAPSHOT_BEING_CREATED
    finalizer = names.FINALIZER_GROUP_SNAPSHOT_CONTENT_BOUND
    secret_annotations = (
        names.ANN_GROUP_SNAPSHOT_DELETION_SECRET_NAME,
        names.ANN_GROUP_SNAPSHOT_DELETION_SECRET_NAMESPACE,
    )
    class_field = "volumeGroupSnapshotClassName"
    status_secret = parameters.GROUP_SNAPSHOTTER_SECRET
    secret_token = "volumegroupsnapshot"
    texts = Texts(
        set_being_created=names.ERROR_GROUP_SNAPSHOT_SET_BEING_CREATED,
        remove_being_created_final=names.ERROR_GROUP_SNAPSHOT_REMOVE_BEING_CREATED_FINAL,
        remove_being_created=names.ERROR_GROUP_SNAPSHOT_REMOVE_BEING_CREATED,
        secret_unspecified=names.ERROR_GROUP_SNAPSHOT_SECRET_UNSPECIFIED,
        credentials=names.ERROR_GROUP_SNAPSHOT_CREDENTIALS,
        update_status=names.ERROR_GROUP_SNAPSHOT_UPDATE_STATUS,
        get_content=names.ERROR_GROUP_SNAPSHOT_GET_CONTENT,
        class_not_found=names.ERROR_GROUP_SNAPSHOT_CLASS_NOT_FOUND,
        get_class=names.ERROR_GROUP_SNAPSHOT_GET_CLASS,
        secret_reference=names.ERROR_GROUP_SNAPSHOT_SECRET_REFERENCE,
        get_credentials=names.ERROR_GROUP_SNAPSHOT_GET_CREDENTIALS,
    )
    delete_events = DeleteEvents(
        reason=names.REASON_GROUP_SNAPSHOT_DELETE_ERROR,
        credentials_failed=names.MESSAGE_GROUP_SNAPSHOT_CREDENTIALS_FAILED,
        delete_failed=names.MESSAGE_GROUP_SNAPSHOT_DELETE_FAILED,
        failed_log="group_snapshot_delete_failed",
        deleted_log="group_snapshot_deleted",
    )

    def is_ours(self, content: Body) -> bool:
        return groups.is_driver_match(content, driver=self.driver.name, class_of=self.classes.get)

    create_failed = (
        names.REASON_GROUP_SNAPSHOT_CREATION_FAILED,
        names.MESSAGE_GROUP_SNAPSHOT_CREATION_FAILED,
    )
    check_failed = (
        names.REASON_GROUP_SNAPSHOT_CHECK_FAILED,
        names.MESSAGE_GROUP_SNAPSHOT_CHECK_FAILED,
    )
    cleared_status = groups.cleared_status_patch()
    clear_failed = (
        names.REASON_GROUP_SNAPSHOT_DELETE_ERROR,
        names.MESSAGE_GROUP_SNAPSHOT_CLEAR_STATUS_FAILED,
    )

    def is_ready(self, content: Body) -> bool:
        return groups.is_ready(content)

    def next_action(self, content: Body) -> groups.Action:
        return groups.next_action(content)

    def should_delete(self, content: Body) -> bool:
        return groups.should_delete(content)

    # -- create ----------------------------------------------------------------------------------

    def _parameters(self, content: Body, cls: Body | None) -> dict[str, str]:
        return parameters.group_driver_parameters(
            (cls or {}).get("parameters"),
            content=content,
            extra_create_metadata=self.options.extra_create_metadata,
        )

    def _take_error(self, content: Body, error: BaseException) -> str:
        volumes = go_list(groups.volume_handles(content))
        return names.ERROR_GROUP_SNAPSHOT_TAKE.format(volumes=volumes, quoted=quoted(error))

    async def _save_created(self, content: Body, answer: csi.VolumeGroupSnapshot) -> Body:
        content = await self._save_snapshots(content, answer)
        log.info(
            "group_snapshot_created",
            group_snapshot_id=answer.group_snapshot_id,
            snapshots=len(answer.snapshots),
            ready=bool(answer.ready_to_use),
        )
        return content

    async def _create_input(self, content: Body) -> tuple[Body | None, dict[str, str] | None]:
        """`getCSIGroupSnapshotInput`: the class, and the secret the annotations name."""
        name = str(content["metadata"]["name"])
        try:
            group_class = self._creation_class(content)
            secrets = await self._credentials_from_annotations(content)
        except SnapshotError as exc:
            message = names.ERROR_GROUP_SNAPSHOT_INPUT.format(content=name, quoted=quoted(exc))
            raise SnapshotError(message, content=content) from exc
        return group_class, secrets

    def _creation_class(self, content: Body) -> Body | None:
        """A dynamic group needs its class; a pre-provisioned one not."""
        unnamed = None
        if groups.volume_handles(content):
            name = content["metadata"]["name"]
            unnamed = names.ERROR_GROUP_SNAPSHOT_WITHOUT_CLASS.format(content=name)
        return self._class_of(content, unnamed=unnamed)

    async def _call_create(
        self, content: Body, params: dict[str, str], secrets: dict[str, str] | None
    ) -> csi.VolumeGroupSnapshot:
        """`csiHandler.CreateGroupSnapshot`: the name comes from the VolumeGroupSnapshot's uid."""
        volumes = groups.volume_handles(content)
        name = content["metadata"]["name"]
        ref = (content.get("spec") or {}).get("volumeGroupSnapshotRef") or {}
        if not ref.get("uid"):
            raise SnapshotError(names.ERROR_GROUP_SNAPSHOT_NOT_BOUND.format(content=name))
        if not volumes:
            raise SnapshotError(names.ERROR_GROUP_SNAPSHOT_NO_VOLUMES.format(content=name))
        request = csi.CreateVolumeGroupSnapshotRequest(
            name=groups.group_snapshot_name(
                self.options.group_snapshot_name_prefix,
                str(ref["uid"]),
                self.options.group_snapshot_name_uuid_length,
            ),
            source_volume_ids=volumes,
            parameters=params,
            secrets=secrets or {},
        )
        answer = await self.csi.create_volume_group_snapshot(request, timeout=self.options.timeout)
        if answer.group_snapshot is None:  # a driver bug
            raise CSIError(
                "CreateVolumeGroupSnapshot returned no group snapshot",
                method="",
                code=Code.INTERNAL,
            )
        return answer.group_snapshot

    # -- check (poll) ----------------------------------------------------------------------------

    async def _check(self, content: Body) -> Body:
        """`checkandUpdateGroupSnapshotContentStatusOperation` with GetVolumeGroupSnapshot."""
        name = str(content["metadata"]["name"])
        secrets = await self._status_secrets(content)
        ids = groups.member_snapshot_ids(content)
        if not ids:
            raise SnapshotError(names.ERROR_GROUP_SNAPSHOT_STATUS_NO_IDS.format(content=name))
        handle = groups.group_handle(content)
        if handle is None:
            raise SnapshotError(names.ERROR_GROUP_SNAPSHOT_STATUS_NO_HANDLE.format(content=name))
        request = csi.GetVolumeGroupSnapshotRequest(
            group_snapshot_id=handle, snapshot_ids=ids, secrets=secrets or {}
        )
        try:
            got = await self.csi.get_volume_group_snapshot(request, timeout=self.options.timeout)
        except CSIError as exc:
            message = names.ERROR_GROUP_SNAPSHOT_STATUS.format(content=name, quoted=quoted(exc))
            raise SnapshotError(message) from exc
        if got.group_snapshot is None:
            error = CSIError(
                "GetVolumeGroupSnapshot returned nothing", method="", code=Code.INTERNAL
            )
            message = names.ERROR_GROUP_SNAPSHOT_STATUS.format(content=name, quoted=quoted(error))
            raise SnapshotError(message)
        return await self._save_snapshots(content, got.group_snapshot, handle=handle)

    async def _status_secrets(self, content: Body) -> dict[str, str] | None:
        """A pre-provisioned content: the class's group-snapshotter secret, if it names one; a
        dynamic one: the secret of its annotations, as for the create."""
        if groups.volume_handles(content):
            return await self._credentials_from_annotations(content)
        return await self._class_secrets(content)

    # -- delete and release ----------------------------------------------------------------------

    async def _call_delete(self, content: Body, secrets: dict[str, str] | None) -> dict[str, Any]:
        """`csiHandler.DeleteGroupSnapshot` (`deleteCSIGroupSnapshotOperation`'s call): the
        member ids are required."""
        name = content["metadata"]["name"]
        ids = groups.member_snapshot_ids(content)
        handle = groups.group_handle(content)
        if not ids:
            raise SnapshotError(names.ERROR_GROUP_SNAPSHOT_DELETE_NO_IDS.format(content=name))
        if handle is None:
            raise SnapshotError(names.ERROR_GROUP_SNAPSHOT_DELETE_NO_HANDLE.format(content=name))
        request = csi.DeleteVolumeGroupSnapshotRequest(
            group_snapshot_id=handle, snapshot_ids=ids, secrets=secrets or {}
        )
        await self.csi.delete_volume_group_snapshot(request, timeout=self.options.timeout)
        return {"group_snapshot_id": handle, "snapshots": len(ids)}

    def _delete_error(self, name: str, error: BaseException) -> str:
        return names.ERROR_GROUP_SNAPSHOT_DELETE.format(
            quoted=go_quote(name), error=error_text(error)
        )

    # -- writes ----------------------------------------------------------------------------------

    async def _save_snapshots(
        self, content: Body, answer: csi.VolumeGroupSnapshot, *, handle: str | None = None
    ) -> Body:
        """`updateGroupSnapshotContentStatus`: the driver's answer into the content's status."""
        return await self._save_status(
            content,
            functools.partial(
                groups.updated_status,
                handle=handle or answer.group_snapshot_id,
                ready=bool(answer.ready_to_use),
                created=_rfc3339(answer.creation_time),
                members=_members(answer),
            ),
        )
