"""A stand-in for the group side of the cluster's snapshot-controller (external-snapshotter's
common controller, pkg/common-controller/groupsnapshot_controller_helper.go).

Scaffolding for tests and the sandbox, as `snapshots.SnapshotController`, which it extends:
the csi-snapshotter only works on VolumeGroupSnapshotContents, and something must make them
out of VolumeGroupSnapshots, and make the member snapshots out of their status.

What it mirrors (read, not copied):

- a VolumeGroupSnapshot with `spec.source.selector` gets its class (the named one, or the
  driver's default group class, written into its spec), and once every claim its labels
  select in its namespace is Bound to a CSI volume, the dynamic content
  `groupsnapcontent-<group uid>`: bound back by uid, with the class's driver and
  deletionPolicy, the volume handles as its source, the bound-protection finalizer, and the
  class's `group-snapshotter-secret-*` templates resolved into the group deletion-secret
  annotations;
- the group gets its bound-protection finalizer, and a status copied from its content:
  boundVolumeGroupSnapshotContentName, readyToUse, creationTime, error;
- once the content's status lists the member snapshots (`volumeSnapshotInfoList`), each gets
  a VolumeSnapshotContent and a VolumeSnapshot bound to it, labelled with the group's name,
  owned by the group, with the in-group finalizer. The content is upstream's: the member's
  volume as `source.volumeHandle`, no class, the annotation
  `groupsnapshot.storage.k8s.io/volumeGroupSnapshotHandle`, the group's secret in the
  deletion-secret annotations, and a status written here, whole (snapshotHandle,
  volumeGroupSnapshotHandle, readyToUse, restoreSize, creationTime), in a second write after
  the create, so that the csi-snapshotter sees the content first without a status, as it does
  on a real server. The member snapshots get their status from their contents like any
  snapshot, so a claim restores from one as usual;
- a deleted group deletes its member snapshots (dropping their in-group finalizer; their
  contents are deleted as any snapshot's, and the csi-snapshotter only releases a member
  content), marks its content being-deleted and, under deletionPolicy Delete, deletes it and
  waits until it is gone (the csi-snapshotter calls DeleteVolumeGroupSnapshot and removes the
  finalizer); under Retain the content stays. Then the group loses its finalizer.

Member names are upstream's: `snapshot-<sha256>` and `snapcontent-<sha256>` of the group's
uid and the member's volume handle.

Left out: pre-provisioned groups (`volumeGroupSnapshotContentName`), `matchExpressions`,
events, and upstream's member VolumeSnapshot source (the member's claim, with the snapshot
bound by its status at once; here `volumeSnapshotContentName`, which binds it the same way).
"""

from __future__ import annotations

import hashlib
import logging

from kopf_csi import names
from kopf_csi.snapshotting import parameters
from kopf_csi.testing.emulator import Body, StatusError
from kopf_csi.testing.snapshots import SnapshotController

__all__ = ["GroupSnapshotController", "group_content_name", "member_names"]

log = logging.getLogger(__name__)

API_VERSION = "groupsnapshot.storage.k8s.io/v1"


def group_content_name(group: Body) -> str:
    return names.GROUP_SNAPSHOT_CONTENT_NAME_PREFIX + str(group["metadata"]["uid"])


def member_names(group_uid: str, volume_handle: str) -> tuple[str, str]:
    """(VolumeSnapshot, VolumeSnapshotContent) names of one member, as upstream's
    `getSnapshotNameForVolumeGroupSnapshotContent` and its content twin."""
    digest = hashlib.sha256((group_uid + volume_handle).encode()).hexdigest()
    return f"snapshot-{digest}", f"snapcontent-{digest}"


def _meta(obj: Body) -> Body:
    return obj.get("metadata") or {}


def _spec(obj: Body) -> Body:
    return obj.get("spec") or {}


class GroupSnapshotController(SnapshotController):
    """The snapshot-controller stand-in with its group side."""

    watched = (
        *SnapshotController.watched,
        "volumegroupsnapshots",
        "volumegroupsnapshotcontents",
        "volumegroupsnapshotclasses",
    )
    task_name = "snapshot-controller-groups"

    def sync(self) -> None:
        super().sync()
        for group in list(self._cache["volumegroupsnapshots"].values()):
            try:
                if _meta(group).get("deletionTimestamp"):
                    self._sync_deleted_group(group)
                else:
                    self._sync_group(group)
            except StatusError as error:
                log.warning("group snapshot stand-in: %s: %s", _meta(group).get("name"), error)

    # --- Member snapshots: bound to their pre-provisioned contents ---------------------------

    def _sync_snapshot(self, snapshot: Body) -> None:
        source = _spec(snapshot).get("source") or {}
        if not source.get("volumeSnapshotContentName"):
            super()._sync_snapshot(snapshot)
            return
        content = self._get("volumesnapshotcontents", source["volumeSnapshotContentName"])
        if content is None:
            return
        wanted = {
            **self._snapshot_status(content),
            "volumeGroupSnapshotName": (_meta(snapshot).get("labels") or {}).get(
                names.LABEL_GROUP_SNAPSHOT_NAME
            ),
        }
        current = snapshot.get("status") or {}
        if any(current.get(k) != v for k, v in wanted.items()):
            self._patch("volumesnapshots", snapshot, {"status": wanted}, status=True)

    def _sync_deleted(self, snapshot: Body) -> None:
        finalizers = list(_meta(snapshot).get("finalizers") or [])
        if names.FINALIZER_SNAPSHOT_IN_GROUP in finalizers:
            remaining = [f for f in finalizers if f != names.FINALIZER_SNAPSHOT_IN_GROUP]
            patch = {"metadata": {"finalizers": remaining + self._snapshot_finalizers()}}
            snapshot = self._patch("volumesnapshots", snapshot, patch)
        super()._sync_deleted(snapshot)

    @staticmethod
    def _snapshot_finalizers() -> list[str]:
        return [names.FINALIZER_SNAPSHOT_AS_SOURCE, names.FINALIZER_SNAPSHOT_BOUND]

    # --- A live group ------------------------------------------------------------------------

    def _sync_group(self, group: Body) -> None:
        source = _spec(group).get("source") or {}
        labels = (source.get("selector") or {}).get("matchLabels")
        if not labels:
            return  # pre-provisioned, or matchExpressions: left out
        content = self._get("volumegroupsnapshotcontents", group_content_name(group))
        if content is None:
            content = self._create_group_content(group, labels)
            if content is None:
                return
        finalizers = list(_meta(group).get("finalizers") or [])
        if names.FINALIZER_GROUP_SNAPSHOT_BOUND not in finalizers:
            patch = {
                "metadata": {"finalizers": [*finalizers, names.FINALIZER_GROUP_SNAPSHOT_BOUND]}
            }
            group = self._patch("volumegroupsnapshots", group, patch)
        self._make_members(group, content)
        status = content.get("status") or {}
        wanted: dict[str, object] = {
            "boundVolumeGroupSnapshotContentName": _meta(content)["name"],
            "readyToUse": bool(status.get("readyToUse")),
        }
        for key in ("creationTime", "error"):
            if status.get(key) is not None:
                wanted[key] = status[key]
        current = group.get("status") or {}
        if any(current.get(k) != v for k, v in wanted.items()):
            self._patch("volumegroupsnapshots", group, {"status": wanted}, status=True)

    def _volumes_of(self, group: Body, labels: dict[str, str]) -> list[Body] | None:
        """The PVs of the selected claims, or None while one is not Bound (upstream waits)."""
        namespace = _meta(group)["namespace"]
        claims = sorted(
            (
                claim
                for (ns, _), claim in self._cache["persistentvolumeclaims"].items()
                if ns == namespace
                and all((_meta(claim).get("labels") or {}).get(k) == v for k, v in labels.items())
            ),
            key=lambda c: str(_meta(c)["name"]),
        )
        volumes = []
        for claim in claims:
            if (claim.get("status") or {}).get("phase") != "Bound":
                return None
            volume = self._get("persistentvolumes", _spec(claim).get("volumeName") or "")
            if volume is None or not (_spec(volume).get("csi") or {}).get("volumeHandle"):
                return None
            volumes.append(volume)
        return volumes or None

    def _group_class_for(self, group: Body, driver: str) -> Body | None:
        name = _spec(group).get("volumeGroupSnapshotClassName")
        if name:
            return self._get("volumegroupsnapshotclasses", name)
        defaults = [
            c
            for c in self._cache["volumegroupsnapshotclasses"].values()
            if c.get("driver") == driver
            and (_meta(c).get("annotations") or {}).get(names.ANN_GROUP_SNAPSHOT_DEFAULT_CLASS)
            == "true"
        ]
        return defaults[0] if len(defaults) == 1 else None

    def _create_group_content(self, group: Body, labels: dict[str, str]) -> Body | None:
        volumes = self._volumes_of(group, labels)
        if volumes is None:
            return None
        handles = [str(_spec(v)["csi"]["volumeHandle"]) for v in volumes]
        group_class = self._group_class_for(group, str(_spec(volumes[0])["csi"].get("driver")))
        if group_class is None:
            return None
        class_name = _meta(group_class)["name"]
        if _spec(group).get("volumeGroupSnapshotClassName") != class_name:
            patch = {"spec": {"volumeGroupSnapshotClassName": class_name}}
            group = self._patch("volumegroupsnapshots", group, patch)
        name = group_content_name(group)
        metadata: dict[str, object] = {
            "name": name,
            "finalizers": [names.FINALIZER_GROUP_SNAPSHOT_CONTENT_BOUND],
        }
        ref = parameters.secret_reference(
            parameters.GROUP_SNAPSHOTTER_SECRET,
            group_class.get("parameters"),
            content_name=name,
            snapshot=group,
            token="volumegroupsnapshot",
        )
        if ref is not None:
            metadata["annotations"] = {
                names.ANN_GROUP_SNAPSHOT_DELETION_SECRET_NAME: ref.name,
                names.ANN_GROUP_SNAPSHOT_DELETION_SECRET_NAMESPACE: ref.namespace,
            }
        meta = _meta(group)
        body = {
            "apiVersion": API_VERSION,
            "kind": "VolumeGroupSnapshotContent",
            "metadata": metadata,
            "spec": {
                "volumeGroupSnapshotRef": {
                    "kind": names.KIND_VOLUME_GROUP_SNAPSHOT,
                    "apiVersion": API_VERSION,
                    "name": meta["name"],
                    "namespace": meta["namespace"],
                    "uid": meta["uid"],
                },
                "source": {"volumeHandles": handles},
                "volumeGroupSnapshotClassName": class_name,
                "deletionPolicy": group_class.get("deletionPolicy", "Delete"),
                "driver": group_class.get("driver"),
            },
        }
        return self._create("volumegroupsnapshotcontents", body)

    def _make_members(self, group: Body, content: Body) -> None:
        """`createSnapshotsForGroupSnapshotContent`: a snapshot and content per member."""
        infos = (content.get("status") or {}).get("volumeSnapshotInfoList") or []
        handle = (content.get("status") or {}).get("volumeGroupSnapshotHandle")
        if not infos or not handle:
            return  # not made yet: nothing to index the volumes for
        by_handle = {
            str((_spec(v).get("csi") or {}).get("volumeHandle")): v
            for v in self._cache["persistentvolumes"].values()
        }
        for info in infos:
            volume = by_handle.get(str(info.get("volumeHandle")))
            if volume is None or not info.get("snapshotHandle"):
                continue
            snapshot_name, member_content = member_names(
                str(_meta(group)["uid"]), str(info["volumeHandle"])
            )
            namespace = _meta(group)["namespace"]
            snapshot = self._get("volumesnapshots", snapshot_name, namespace)
            if snapshot is None:
                snapshot = self._create_member_snapshot(group, snapshot_name, member_content)
            if self._get("volumesnapshotcontents", member_content) is None:
                self._create_member_content(
                    content, snapshot, member_content, info=info, volume=volume, handle=handle
                )

    def _create_member_snapshot(self, group: Body, name: str, content: str) -> Body:
        meta = _meta(group)
        body = {
            "apiVersion": "snapshot.storage.k8s.io/v1",
            "kind": names.KIND_VOLUME_SNAPSHOT,
            "metadata": {
                "name": name,
                "namespace": meta["namespace"],
                "labels": {names.LABEL_GROUP_SNAPSHOT_NAME: meta["name"]},
                "finalizers": [names.FINALIZER_SNAPSHOT_IN_GROUP, *self._snapshot_finalizers()],
                "ownerReferences": [
                    {
                        "apiVersion": API_VERSION,
                        "kind": names.KIND_VOLUME_GROUP_SNAPSHOT,
                        "name": meta["name"],
                        "uid": meta["uid"],
                    }
                ],
            },
            "spec": {"source": {"volumeSnapshotContentName": content}},
        }
        return self._create("volumesnapshots", body)

    def _create_member_content(
        self,
        group_content: Body,
        snapshot: Body,
        name: str,
        *,
        info: Body,
        volume: Body,
        handle: str,
    ) -> None:
        """As upstream: a dynamic-looking content (the member's volume as its source, no
        class), marked as a member by the group handle annotation, with the group's secret in
        the deletion-secret annotations; then its whole status, from the group content's list,
        in a second write. The csi-snapshotter leaves such a content alone."""
        meta = _meta(snapshot)
        annotations = {names.ANN_GROUP_SNAPSHOT_HANDLE: handle}
        group_annotations = _meta(group_content).get("annotations") or {}
        secret_keys = (
            (
                names.ANN_GROUP_SNAPSHOT_DELETION_SECRET_NAME,
                names.ANN_SNAPSHOT_DELETION_SECRET_NAME,
            ),
            (
                names.ANN_GROUP_SNAPSHOT_DELETION_SECRET_NAMESPACE,
                names.ANN_SNAPSHOT_DELETION_SECRET_NAMESPACE,
            ),
        )
        if all(group_key in group_annotations for group_key, _ in secret_keys):
            for group_key, key in secret_keys:
                annotations[key] = group_annotations[group_key]
        body = {
            "apiVersion": "snapshot.storage.k8s.io/v1",
            "kind": "VolumeSnapshotContent",
            "metadata": {
                "name": name,
                "annotations": annotations,
                "finalizers": [names.FINALIZER_SNAPSHOT_CONTENT_BOUND],
            },
            "spec": {
                "volumeSnapshotRef": {
                    "kind": names.KIND_VOLUME_SNAPSHOT,
                    "name": meta["name"],
                    "namespace": meta["namespace"],
                    "uid": meta["uid"],
                },
                "source": {"volumeHandle": info["volumeHandle"]},
                "deletionPolicy": _spec(group_content).get("deletionPolicy", "Delete"),
                "driver": _spec(group_content).get("driver"),
                "sourceVolumeMode": _spec(volume).get("volumeMode") or "Filesystem",
            },
        }
        created = self._create("volumesnapshotcontents", body)
        status: dict[str, object] = {
            "snapshotHandle": info["snapshotHandle"],
            "volumeGroupSnapshotHandle": handle,
            "readyToUse": bool(info.get("readyToUse")),
        }
        for key in ("creationTime", "restoreSize"):
            if info.get(key) is not None:
                status[key] = info[key]
        self._patch("volumesnapshotcontents", created, {"status": status}, status=True)

    # --- A deleted group ---------------------------------------------------------------------

    def _sync_deleted_group(self, group: Body) -> None:
        finalizers = list(_meta(group).get("finalizers") or [])
        if names.FINALIZER_GROUP_SNAPSHOT_BOUND not in finalizers:
            return
        meta = _meta(group)
        for (namespace, name), snapshot in list(self._cache["volumesnapshots"].items()):
            labels = _meta(snapshot).get("labels") or {}
            member = labels.get(names.LABEL_GROUP_SNAPSHOT_NAME) == meta["name"]
            deleting = bool(_meta(snapshot).get("deletionTimestamp"))
            if namespace == meta["namespace"] and member and not deleting:
                self.cluster.delete("volumesnapshots", namespace, name, manager=self.manager)
        content = self._get("volumegroupsnapshotcontents", group_content_name(group))
        if content is not None:
            annotations = _meta(content).get("annotations") or {}
            if names.ANN_GROUP_SNAPSHOT_BEING_DELETED not in annotations:
                patch = {
                    "metadata": {"annotations": {names.ANN_GROUP_SNAPSHOT_BEING_DELETED: "yes"}}
                }
                content = self._patch("volumegroupsnapshotcontents", content, patch)
            if _spec(content).get("deletionPolicy") == "Delete":
                if not _meta(content).get("deletionTimestamp"):
                    self.cluster.delete(
                        "volumegroupsnapshotcontents",
                        None,
                        _meta(content)["name"],
                        manager=self.manager,
                    )
                return  # the group stays until its content is gone
        remaining = [f for f in finalizers if f != names.FINALIZER_GROUP_SNAPSHOT_BOUND]
        self._patch("volumegroupsnapshots", group, {"metadata": {"finalizers": remaining}})
