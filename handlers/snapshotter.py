"""csi-snapshotter as kopf handlers: VolumeSnapshotContents of our driver made and unmade.

Thin on purpose. kopf's watches feed the snapshotter's own content and class caches and one
work queue (`csi-snapshotter-content`, `snapshotter.workers` workers: Go's `--worker-threads`);
the operations live in `kopf_csi.snapshotting.operations`. Each content backs off 1 s → 5 min
while it fails, and a snapshot that is not ready yet is polled on that same backoff.

Runs only when the driver has CREATE_DELETE_SNAPSHOT (upstream exits without it; here the
other controllers carry on, and the reason is logged once). A watch event that only changed
the status, the finalizers or our being-created annotation (our own writes) is not queued:
it would run the content again at once and defeat its backoff. VolumeSnapshots themselves are
the cluster's snapshot-controller's business, not ours.
"""

from __future__ import annotations

from typing import Any

import kopf
import structlog

from kopf_csi import events, kube, names, runtime
from kopf_csi.snapshotting import running
from kopf_csi.snapshotting.operations import Snapshotter

log = structlog.get_logger("kopf_csi.snapshotter")


@kopf.on.startup(id="snapshotter.start")
async def start(memo: kopf.Memo, **_: Any) -> None:
    memo.snapshotter = None
    settings = runtime.settings_from_memo(memo)
    options = settings.snapshotter
    if not options.enabled:
        return
    if not await runtime.wait_for_driver(memo):
        return
    if not memo.driver.has_controller("CREATE_DELETE_SNAPSHOT"):
        log.info("snapshotter_off", reason="the driver has no CREATE_DELETE_SNAPSHOT")
        return
    component = names.SNAPSHOTTER_EVENT_COMPONENT.format(driver=memo.driver.name)
    api = memo.api.as_manager(names.MANAGER_SNAPSHOTTER)
    snapshotter = Snapshotter(
        csi_client=memo.csi,
        api=api,
        recorder=events.Recorder(api, component=component),
        driver=memo.driver,
        options=options,
    )
    # The informers' first LIST (WaitForCacheSync), classes first: they decide what is ours.
    queue = await running.start(
        memo, snapshotter, queue_name="csi-snapshotter-content", classes=kube.SNAPSHOT_CLASSES
    )
    if queue is None:
        # Decided once: kopf watches only the resources served at its start (runtime.py), so
        # CRDs installed later need a restart (docs/operations.md, "RBAC").
        log.warning(
            "snapshotter_off",
            reason="the snapshot.storage.k8s.io/v1 API is not served",
            hint="install the snapshot CRDs, then restart the operator",
        )
        return
    memo.snapshotter, memo.snapshotter_queue = snapshotter, queue
    log.info("snapshotter_started", contents=len(snapshotter.contents))


@kopf.on.event("snapshot.storage.k8s.io", "v1", "volumesnapshotcontents", id="snapshotter.contents")
async def content_changed(memo: kopf.Memo, event: kopf.RawEvent, **_: Any) -> None:
    controller = getattr(memo, "snapshotter", None)
    running.content_event(controller, getattr(memo, "snapshotter_queue", None), event)


@kopf.on.event("snapshot.storage.k8s.io", "v1", "volumesnapshotclasses", id="snapshotter.classes")
async def class_changed(memo: kopf.Memo, event: kopf.RawEvent, **_: Any) -> None:
    running.class_event(getattr(memo, "snapshotter", None), event)
