"""A stand-in for the cluster's snapshot-controller (external-snapshotter's common controller).

Scaffolding for tests and the sandbox, not part of the operator: the csi-snapshotter only
works on VolumeSnapshotContents, and something must make them out of VolumeSnapshots. In a
real cluster that is the snapshot-controller Deployment; on an `EmulatedCluster` it is this
module, as `kcm.ControllerManager` stands in for kube-controller-manager.

What it mirrors, from external-snapshotter's pkg/common-controller (read, not copied; see
sidecars.md §1.4):

- a VolumeSnapshot with `spec.source.persistentVolumeClaimName` gets its class (the named one,
  or the driver's default class, which is then written into the snapshot's spec), and, once the
  claim is Bound to a CSI volume, the dynamic content `snapcontent-<snapshot uid>`: bound back
  to the snapshot by uid, with the class's driver and deletionPolicy, the volume handle and mode
  as its source, the bound-protection finalizer, and the class's `snapshotter-secret-*`
  templates resolved into the deletion-secret annotations (`GetSecretReference`);
- the snapshot gets the bound-protection and as-source finalizers, and a status copied from
  its content: boundVolumeSnapshotContentName, readyToUse, creationTime, restoreSize, error;
- a deleted snapshot marks its content being-deleted; under deletionPolicy Delete it deletes
  the content and waits until it is gone (the csi-snapshotter deletes the snapshot on the
  driver and removes the content's finalizer); under Retain the content stays. Then, once no
  Pending claim is being restored from it, the snapshot loses its finalizers.

Left out: pre-provisioned snapshots (`volumeSnapshotContentName` sources; the members of a
group snapshot are handled by its subclass, `groupsnapshots.GroupSnapshotController`), the
PVC's `pvc-as-source-protection` finalizer, validation labels, events, and distributed
snapshotting.

How it runs: in-process on the emulator's change feed, one level-triggered synchronous pass
per batch of changes, like `kcm`.
"""

from __future__ import annotations

import datetime
import logging
from typing import ClassVar

from kopf_csi import names
from kopf_csi.provisioning.quantities import format_binary_si
from kopf_csi.snapshotting import parameters
from kopf_csi.testing.emulator import Body, EmulatedCluster, StatusError
from kopf_csi.testing.standins import PassingStandIn

__all__ = ["SnapshotController", "content_name"]

log = logging.getLogger(__name__)

_OUR_SNAPSHOT_FINALIZERS = (names.FINALIZER_SNAPSHOT_AS_SOURCE, names.FINALIZER_SNAPSHOT_BOUND)


def content_name(snapshot: Body) -> str:
    """`GetDynamicSnapshotContentNameForSnapshot`."""
    return names.SNAPSHOT_CONTENT_NAME_PREFIX + str(snapshot["metadata"]["uid"])


def _meta(obj: Body) -> Body:
    return obj.get("metadata") or {}


def _spec(obj: Body) -> Body:
    return obj.get("spec") or {}


def _rfc3339(nanoseconds: int) -> str:
    when = datetime.datetime.fromtimestamp(nanoseconds / 1e9, tz=datetime.UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


class SnapshotController(PassingStandIn):
    """``async with SnapshotController(cluster): ...`` runs the stand-in as a background task."""

    watched: ClassVar[tuple[str, ...]] = (
        "volumesnapshots",
        "volumesnapshotcontents",
        "volumesnapshotclasses",
        "persistentvolumeclaims",
        "persistentvolumes",
    )
    task_name = "snapshot-controller"
    manager = "snapshot-controller"

    def __init__(self, cluster: EmulatedCluster) -> None:
        super().__init__(cluster)
        self.passes = 0

    def sync(self) -> None:
        """One level-triggered pass over every VolumeSnapshot."""
        self.passes += 1
        for snapshot in list(self._cache["volumesnapshots"].values()):
            try:
                if _meta(snapshot).get("deletionTimestamp"):
                    self._sync_deleted(snapshot)
                else:
                    self._sync_snapshot(snapshot)
            except StatusError as error:  # deleted meanwhile, a conflict: the next pass retries
                log.warning("snapshot stand-in: %s: %s", _meta(snapshot).get("name"), error)

    # --- Helpers -------------------------------------------------------------------------

    def _get(self, plural: str, name: str, namespace: str = "") -> Body | None:
        return self._cache[plural].get((namespace, name))

    def _class_for(self, snapshot: Body, driver: str) -> Body | None:
        name = _spec(snapshot).get("volumeSnapshotClassName")
        if name:
            return self._get("volumesnapshotclasses", name)
        defaults = [
            c
            for c in self._cache["volumesnapshotclasses"].values()
            if c.get("driver") == driver
            and (_meta(c).get("annotations") or {}).get(names.ANN_SNAPSHOT_DEFAULT_CLASS) == "true"
        ]
        return defaults[0] if len(defaults) == 1 else None  # several defaults: an error upstream

    # --- A live snapshot ---------------------------------------------------------------------

    def _sync_snapshot(self, snapshot: Body) -> None:
        claim_name = (_spec(snapshot).get("source") or {}).get("persistentVolumeClaimName")
        if not claim_name:
            return  # pre-provisioned: left out
        content = self._get("volumesnapshotcontents", content_name(snapshot))
        if content is None:
            content = self._create_content(snapshot, claim_name)
            if content is None:
                return
        finalizers = list(_meta(snapshot).get("finalizers") or [])
        missing = [f for f in _OUR_SNAPSHOT_FINALIZERS if f not in finalizers]
        if missing:
            snapshot = self._patch(
                "volumesnapshots", snapshot, {"metadata": {"finalizers": finalizers + missing}}
            )
        wanted = self._snapshot_status(content)
        current = snapshot.get("status") or {}
        if any(current.get(k) != v for k, v in wanted.items()):
            self._patch("volumesnapshots", snapshot, {"status": wanted}, status=True)

    def _create_content(self, snapshot: Body, claim_name: str) -> Body | None:
        namespace = _meta(snapshot)["namespace"]
        claim = self._get("persistentvolumeclaims", claim_name, namespace)
        if claim is None or (claim.get("status") or {}).get("phase") != "Bound":
            return None  # upstream: "the PVC is not yet bound to a PV, will not attempt ..."
        volume = self._get("persistentvolumes", _spec(claim).get("volumeName") or "")
        csi = _spec(volume or {}).get("csi") or {}
        if not csi.get("volumeHandle"):
            return None
        snapshot_class = self._class_for(snapshot, csi.get("driver", ""))
        if snapshot_class is None:
            return None
        class_name = _meta(snapshot_class)["name"]
        if _spec(snapshot).get("volumeSnapshotClassName") != class_name:
            patch = {"spec": {"volumeSnapshotClassName": class_name}}
            snapshot = self._patch("volumesnapshots", snapshot, patch)
        name = content_name(snapshot)
        metadata: dict[str, object] = {
            "name": name,
            "finalizers": [names.FINALIZER_SNAPSHOT_CONTENT_BOUND],
        }
        ref = parameters.secret_reference(
            parameters.SNAPSHOTTER_SECRET,
            snapshot_class.get("parameters"),
            content_name=name,
            snapshot=snapshot,
        )
        if ref is not None:
            metadata["annotations"] = {
                names.ANN_SNAPSHOT_DELETION_SECRET_NAME: ref.name,
                names.ANN_SNAPSHOT_DELETION_SECRET_NAMESPACE: ref.namespace,
            }
        body = {
            "apiVersion": "snapshot.storage.k8s.io/v1",
            "kind": "VolumeSnapshotContent",
            "metadata": metadata,
            "spec": {
                "volumeSnapshotRef": {
                    "kind": "VolumeSnapshot",
                    "apiVersion": "snapshot.storage.k8s.io/v1",
                    "name": _meta(snapshot)["name"],
                    "namespace": namespace,
                    "uid": _meta(snapshot)["uid"],
                },
                "source": {"volumeHandle": csi["volumeHandle"]},
                "volumeSnapshotClassName": class_name,
                "deletionPolicy": snapshot_class.get("deletionPolicy", "Delete"),
                "driver": snapshot_class.get("driver"),
                "sourceVolumeMode": _spec(volume or {}).get("volumeMode") or "Filesystem",
            },
        }
        return self._create("volumesnapshotcontents", body)

    @staticmethod
    def _snapshot_status(content: Body) -> dict[str, object]:
        status = content.get("status") or {}
        wanted: dict[str, object] = {
            "boundVolumeSnapshotContentName": _meta(content)["name"],
            "readyToUse": bool(status.get("readyToUse")),
        }
        if status.get("creationTime") is not None:
            wanted["creationTime"] = _rfc3339(int(status["creationTime"]))
        if status.get("restoreSize") is not None:
            wanted["restoreSize"] = format_binary_si(int(status["restoreSize"]))
        if status.get("error") is not None:
            wanted["error"] = status["error"]
        return wanted

    # --- A deleted snapshot ------------------------------------------------------------------

    def _sync_deleted(self, snapshot: Body) -> None:
        finalizers = list(_meta(snapshot).get("finalizers") or [])
        if not any(f in finalizers for f in _OUR_SNAPSHOT_FINALIZERS):
            return
        content = self._get("volumesnapshotcontents", self._content_name_of(snapshot))
        if content is not None:
            annotations = _meta(content).get("annotations") or {}
            if names.ANN_SNAPSHOT_BEING_DELETED not in annotations:
                patch = {"metadata": {"annotations": {names.ANN_SNAPSHOT_BEING_DELETED: "yes"}}}
                content = self._patch("volumesnapshotcontents", content, patch)
            if _spec(content).get("deletionPolicy") == "Delete":
                if not _meta(content).get("deletionTimestamp"):
                    self.cluster.delete(
                        "volumesnapshotcontents", None, _meta(content)["name"], manager=self.manager
                    )
                return  # the snapshot stays until its content is gone
        if self._restoring_from(snapshot):
            return  # a claim is still being made from it
        remaining = [f for f in finalizers if f not in _OUR_SNAPSHOT_FINALIZERS]
        self._patch("volumesnapshots", snapshot, {"metadata": {"finalizers": remaining}})

    def _content_name_of(self, snapshot: Body) -> str:
        """The content a snapshot is bound to: its pre-provisioned source, else the dynamic one."""
        source = _spec(snapshot).get("source") or {}
        return str(source.get("volumeSnapshotContentName") or content_name(snapshot))

    def _restoring_from(self, snapshot: Body) -> bool:
        """`isVolumeBeingCreatedFromSnapshot`: a Pending claim names it as its data source."""
        meta = _meta(snapshot)
        for (namespace, _), claim in self._cache["persistentvolumeclaims"].items():
            source = _spec(claim).get("dataSource") or {}
            if (
                namespace == meta["namespace"]
                and source.get("kind") == names.KIND_VOLUME_SNAPSHOT
                and source.get("name") == meta["name"]
                and (claim.get("status") or {}).get("phase") == "Pending"
            ):
                return True
        return False
