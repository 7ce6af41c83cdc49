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
from collections.abc import Mapping
from typing import Any

import structlog

from kopf_csi import kube, names
from kopf_csi.csi import Code, CSIError
from kopf_csi.csi import messages as csi
from kopf_csi.provisioning.gofmt import go_list, go_quote
from kopf_csi.queueing import RETRY, Outcome
from kopf_csi.snapshotting import groups, parameters
from kopf_csi.snapshotting.contents import ContentController, Texts, now_rfc3339, read_secret
from kopf_csi.snapshotting.errors import SnapshotError, controller_update_error, error_text, quoted
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
    texts = Texts(
        set_being_created=names.ERROR_GROUP_SNAPSHOT_SET_BEING_CREATED,
        remove_being_created_final=names.ERROR_GROUP_SNAPSHOT_REMOVE_BEING_CREATED_FINAL,
        remove_being_created=names.ERROR_GROUP_SNAPSHOT_REMOVE_BEING_CREATED,
        secret_unspecified=names.ERROR_GROUP_SNAPSHOT_SECRET_UNSPECIFIED,
        credentials=names.ERROR_GROUP_SNAPSHOT_CREDENTIALS,
        update_status=names.ERROR_GROUP_SNAPSHOT_UPDATE_STATUS,
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
        content = await self._save_status(content, answer)
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
            group_class = self._class_of(content, required=bool(groups.volume_handles(content)))
            secrets = await self._credentials_from_annotations(content)
        except SnapshotError as exc:
            message = names.ERROR_GROUP_SNAPSHOT_INPUT.format(content=name, quoted=quoted(exc))
            raise SnapshotError(message, content=content) from None
        return group_class, secrets

    def _class_of(self, content: Body, *, required: bool) -> Body | None:
        class_name = (content.get("spec") or {}).get("volumeGroupSnapshotClassName")
        if class_name:
            group_class = self.classes.get(str(class_name))
            if group_class is None:
                raise SnapshotError(
                    names.ERROR_GROUP_SNAPSHOT_CLASS_NOT_FOUND.format(name=class_name)
                )
            return group_class
        if required:
            name = content["metadata"]["name"]
            raise SnapshotError(names.ERROR_GROUP_SNAPSHOT_WITHOUT_CLASS.format(content=name))
        return None

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
            raise SnapshotError(message) from None
        if got.group_snapshot is None:
            error = CSIError(
                "GetVolumeGroupSnapshot returned nothing", method="", code=Code.INTERNAL
            )
            message = names.ERROR_GROUP_SNAPSHOT_STATUS.format(content=name, quoted=quoted(error))
            raise SnapshotError(message)
        return await self._save_status(content, got.group_snapshot, handle=handle)

    async def _status_secrets(self, content: Body) -> dict[str, str] | None:
        """A pre-provisioned content: the class's group-snapshotter secret, if it names one; a
        dynamic one: the secret of its annotations, as for the create."""
        if groups.volume_handles(content):
            return await self._credentials_from_annotations(content)
        name = str(content["metadata"]["name"])
        class_name = (content.get("spec") or {}).get("volumeGroupSnapshotClassName")
        if not class_name:
            return None
        try:
            group_class = self._class_of(content, required=False)
        except SnapshotError as exc:
            raise SnapshotError(
                names.ERROR_GROUP_SNAPSHOT_GET_CLASS.format(
                    name=class_name, content=name, error=exc.message
                )
            ) from None
        try:
            ref = parameters.secret_reference(
                parameters.GROUP_SNAPSHOTTER_SECRET,
                (group_class or {}).get("parameters"),
                content_name=name,
                token="volumegroupsnapshot",
            )
        except parameters.ParameterError as exc:
            raise SnapshotError(
                names.ERROR_GROUP_SNAPSHOT_SECRET_REFERENCE.format(content=name, error=exc)
            ) from None
        if ref is None:
            return None
        try:
            return await read_secret(self.api, ref.name, ref.namespace)
        except SnapshotError as exc:
            message = names.ERROR_GROUP_SNAPSHOT_GET_CREDENTIALS.format(
                content=name, error=exc.message
            )
            raise SnapshotError(message) from None

    # -- delete and release ----------------------------------------------------------------------

    async def _delete_on_driver(self, content: Body) -> Outcome | None:
        """`deleteCSIGroupSnapshotOperation`'s call: DeleteVolumeGroupSnapshot with the member
        ids; then the base clears the status and `removeGroupSnapshotContentFinalizer`."""
        name = str(content["metadata"]["name"])
        try:
            secrets = await self._credentials_from_annotations(content)
        except SnapshotError as exc:
            log.warning("group_snapshot_delete_failed", error=exc.message)
            await self._event(
                content,
                names.REASON_GROUP_SNAPSHOT_DELETE_ERROR,
                names.MESSAGE_GROUP_SNAPSHOT_CREDENTIALS_FAILED,
            )
            return RETRY
        ids = groups.member_snapshot_ids(content)
        handle = groups.group_handle(content)
        try:
            await self._call_delete(name, handle, ids, secrets)
        except (SnapshotError, CSIError) as exc:
            error = names.ERROR_GROUP_SNAPSHOT_DELETE.format(
                quoted=go_quote(name), error=error_text(exc)
            )
            log.warning("group_snapshot_delete_failed", error=error)
            await self._event(
                content,
                names.REASON_GROUP_SNAPSHOT_DELETE_ERROR,
                names.MESSAGE_GROUP_SNAPSHOT_DELETE_FAILED,
            )
            return RETRY
        log.info("group_snapshot_deleted", group_snapshot_id=handle, snapshots=len(ids))
        return None

    async def _call_delete(
        self, name: str, handle: str | None, ids: list[str], secrets: dict[str, str] | None
    ) -> None:
        """`csiHandler.DeleteGroupSnapshot`: the member ids are required."""
        if not ids:
            raise SnapshotError(names.ERROR_GROUP_SNAPSHOT_DELETE_NO_IDS.format(content=name))
        if handle is None:
            raise SnapshotError(names.ERROR_GROUP_SNAPSHOT_DELETE_NO_HANDLE.format(content=name))
        request = csi.DeleteVolumeGroupSnapshotRequest(
            group_snapshot_id=handle, snapshot_ids=ids, secrets=secrets or {}
        )
        await self.csi.delete_volume_group_snapshot(request, timeout=self.options.timeout)

    # -- writes ----------------------------------------------------------------------------------

    async def _save_status(
        self, content: Body, answer: csi.VolumeGroupSnapshot, *, handle: str | None = None
    ) -> Body:
        """`updateGroupSnapshotContentStatus`: read the content from the API, fill its status.

        The write is guarded by the resourceVersion it was computed from. A 409 means that
        someone wrote first: read again and retry at once, quietly (the driver's answer is in
        hand; failing here would call the driver again for work that already succeeded).
        """
        name = str(content["metadata"]["name"])

        async def write(fresh: Body) -> Body:
            status = groups.updated_status(
                fresh.get("status"),
                handle=handle or answer.group_snapshot_id,
                ready=bool(answer.ready_to_use),
                created=_rfc3339(answer.creation_time),
                members=_members(answer),
            )
            if status is None:
                return fresh
            dropped = {key: None for key in fresh.get("status") or {} if key not in status}
            patch = kube.guarded_patch(fresh, {"status": {**status, **dropped}})
            updated = await self.api.patch(self.resource, name, patch, subresource="status")
            self.contents.store(updated)
            return updated

        async def read() -> Body:
            log.debug("group_status_raced", content=name)
            return await self._read(content)

        try:
            return await kube.retry_on_conflict(write, await self._read(content), read=read)
        except kube.KubeError as exc:
            raise SnapshotError(
                controller_update_error(name, exc.message), content=content
            ) from None

    async def _read(self, content: Body) -> Body:
        name = str(content["metadata"]["name"])
        try:
            fresh = await self.api.get(self.resource, name)
        except kube.KubeError as exc:
            error = exc.message
        else:
            error = f'volumegroupsnapshotcontents.groupsnapshot.storage.k8s.io "{name}" not found'
        if fresh is None:
            message = names.ERROR_GROUP_SNAPSHOT_GET_CONTENT.format(content=name, error=error)
            raise SnapshotError(message, content=content)
        self.contents.store(fresh)
        return fresh
