"""csi-snapshotter's group side as kopf handlers: VolumeGroupSnapshotContents of our driver.

Thin on purpose, as `handlers/snapshotter.py`: kopf's watches feed the group content and class
caches and one work queue (`csi-snapshotter-groupsnapshotcontent`, the snapshotter's workers);
the operations live in `kopf_csi.snapshotting.group_operations`.

Runs only when the snapshotter runs, `--enable-volume-group-snapshots` is on (the default, as
the `CSIVolumeGroupSnapshot` gate is GA in csi-snapshotter v8), the driver advertises the
GROUP_CONTROLLER_SERVICE with CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT, and the
groupsnapshot.storage.k8s.io/v1 API is served. Otherwise it stays idle and says why once.
"""

from __future__ import annotations

from typing import Any

import kopf
import structlog

from kopf_csi import events, kube, names, runtime
from kopf_csi.snapshotting import running
from kopf_csi.snapshotting.group_operations import GroupSnapshotter

log = structlog.get_logger("kopf_csi.snapshotter")

CAPABILITY = "CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT"


def _idle_reason(memo: kopf.Memo) -> str | None:
    driver = memo.driver
    if not driver.has_plugin("GROUP_CONTROLLER_SERVICE"):
        return "the driver has no GROUP_CONTROLLER_SERVICE"
    if not driver.has_group_controller(CAPABILITY):
        return f"the driver has no {CAPABILITY}"
    return None


@kopf.on.startup(id="groupsnapshotter.start")
async def start(memo: kopf.Memo, **_: Any) -> None:
    memo.group_snapshotter = None
    settings = runtime.settings_from_memo(memo)
    options = settings.snapshotter
    if not options.enabled or not options.enable_volume_group_snapshots:
        return
    if not await runtime.wait_for_driver(memo):
        return
    reason = _idle_reason(memo)
    if reason is not None:
        log.info("group_snapshotter_off", reason=reason)
        return
    component = names.SNAPSHOTTER_EVENT_COMPONENT.format(driver=memo.driver.name)
    api = memo.api.as_manager(names.MANAGER_SNAPSHOTTER)  # csi-snapshotter writes them in Go
    snapshotter = GroupSnapshotter(
        csi_client=memo.csi,
        api=api,
        recorder=events.Recorder(api, component=component),
        driver=memo.driver,
        options=options,
    )
    queue = await running.start(
        memo,
        snapshotter,
        queue_name="csi-snapshotter-groupsnapshotcontent",
        classes=kube.GROUP_SNAPSHOT_CLASSES,
    )
    if queue is None:
        # Many clusters have no group snapshot CRDs: idle, said at info (a clean start-up log).
        reason = "the groupsnapshot.storage.k8s.io/v1 API is not served"
        log.info("group_snapshotter_off", reason=reason, hint="install the CRDs, then restart")
        return
    memo.group_snapshotter, memo.group_snapshotter_queue = snapshotter, queue
    log.info("group_snapshotter_started", contents=len(snapshotter.contents))


@kopf.on.event(
    "groupsnapshot.storage.k8s.io", "v1", "volumegroupsnapshotcontents",
    id="groupsnapshotter.contents",
)  # fmt: skip
async def content_changed(memo: kopf.Memo, event: kopf.RawEvent, **_: Any) -> None:
    controller = getattr(memo, "group_snapshotter", None)
    running.content_event(controller, getattr(memo, "group_snapshotter_queue", None), event)


@kopf.on.event(
    "groupsnapshot.storage.k8s.io", "v1", "volumegroupsnapshotclasses",
    id="groupsnapshotter.classes",
)  # fmt: skip
async def class_changed(memo: kopf.Memo, event: kopf.RawEvent, **_: Any) -> None:
    running.class_event(getattr(memo, "group_snapshotter", None), event)
