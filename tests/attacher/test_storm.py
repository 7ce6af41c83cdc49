"""A detach storm does not starve attaches (external-attacher #761), end to end.

We test these aspects:
- with 200 VolumeAttachments being deleted and a slow ControllerUnpublishVolume (0.5 s, 10
  workers: a 10 s backlog), a new VA is attached at once (typically in a few milliseconds;
  the bound allows for a loaded machine), while the storm has hardly started; upstream's
  single queue would make it wait for the whole backlog.
"""

from __future__ import annotations

import pathlib
import time
from typing import Any

from kopf_csi.driver import Driver
from kopf_csi.settings import Settings
from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.operator import running_operator

from ..conftest import NODE
from .helpers import (
    FINALIZER,
    NODE_ID_ANNOTATION,
    attached_volume,
    attachment,
    seed_node,
    status,
    until,
    volume,
)

STORM = 200
UNPUBLISH_SECONDS = 0.5


async def test_a_detach_storm_does_not_starve_an_attach(
    cluster: EmulatedCluster,
    driver: Driver,
    socket_path: pathlib.Path,
    settings: Settings,
    handler_modules: tuple[str, ...],
) -> None:
    seed_node(cluster)
    for index in range(STORM):
        name = f"storm-{index}"
        cluster.create("persistentvolumes", volume(name, f"gone-{index}"))
        meta: dict[str, Any] = {
            "finalizers": [FINALIZER],
            "annotations": {NODE_ID_ANNOTATION: NODE},
        }
        cluster.create("volumeattachments", attachment(name, name, **meta))
        cluster.delete("volumeattachments", None, name)  # deleting: a detach each
    driver.faults.delay("ControllerUnpublishVolume", seconds=UNPUBLISH_SECONDS)
    assert settings.workers.attacher == 10

    async with running_operator(settings=settings, modules=handler_modules) as operator:
        await until(lambda: operator.memo.detach_queue.in_flight == 10)
        handle, _ = await attached_volume(cluster, socket_path, "pv-new")
        started = time.monotonic()
        cluster.create("volumeattachments", attachment("va-new", "pv-new"))
        await until(lambda: status(cluster, "va-new").get("attached"), timeout=3)
        elapsed = time.monotonic() - started

        remaining = len(cluster.objects("volumeattachments")) - 1
        backlog = STORM * UNPUBLISH_SECONDS / settings.workers.attacher
        assert elapsed < backlog / 10, elapsed
        assert remaining >= STORM - 50, remaining  # the storm is still raging
        assert NODE in driver.state.volumes[handle].attachments
        driver.faults.clear()  # let the in-flight unpublishes end quickly at the stop
