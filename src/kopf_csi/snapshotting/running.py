"""Running one content controller: its informers' first LIST, its work queue, its resync.

What `handlers/snapshotter.py` and `handlers/groupsnapshotter.py` share: both sidecar loops of
csi-snapshotter are the same shape (classes first, then contents, one rate-limited queue, a
periodic resync of what is not settled), over different kinds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from kopf_csi import kube, metrics
from kopf_csi.queueing import WorkQueue
from kopf_csi.snapshotting.contents import ContentController

__all__ = ["class_event", "content_event", "start"]


async def start(
    memo: Any,
    controller: ContentController,
    *,
    queue_name: str,
    classes: kube.Resource,
) -> WorkQueue[str] | None:
    """The first LISTs (classes first: they decide what is ours), then the queue, seeded with
    the contents that need a sync; None when the API does not serve these kinds."""
    try:
        for found in await memo.api.list(classes):
            controller.classes.store(found)
        contents = await memo.api.list(controller.resource)
    except kube.NotFoundError:
        return None
    options = controller.options
    queue: WorkQueue[str] = WorkQueue(
        name=queue_name,
        process=controller.sync,
        workers=options.workers,
        backoff_start=options.retry_interval_start,
        backoff_max=options.retry_interval_max,
        observer=metrics.from_memo(memo),
    )
    queue.start()
    for content in contents:
        if controller.observe(content):
            queue.add(content["metadata"]["name"])
    resync = asyncio.create_task(_resync(controller, queue), name=f"{queue_name}-resync")
    memo.stoppers.append(_stopper(queue, resync))
    return queue


def _stopper(queue: WorkQueue[str], resync: asyncio.Task[None]) -> Callable[[], Awaitable[None]]:
    async def stop() -> None:
        resync.cancel()
        await asyncio.gather(resync, return_exceptions=True)
        await queue.stop(grace=5.0)

    return stop


async def _resync(controller: ContentController, queue: WorkQueue[str]) -> None:
    """`--resync-period`: look again at every content that is not settled (not ready yet, or
    being deleted), in case an event was missed."""
    while True:
        await asyncio.sleep(controller.options.resync_period)
        for name in controller.unsettled():
            queue.add(name)


def content_event(
    controller: ContentController | None,
    queue: WorkQueue[str] | None,
    event: Mapping[str, Any],
) -> None:
    """A content's watch event: into the cache, and into the queue if it needs a sync."""
    if controller is None or queue is None:
        return
    content = event["object"]
    name = content["metadata"]["name"]
    if event.get("type") == "DELETED":
        controller.observe(content, deleted=True)
        queue.discard(name)
    elif controller.observe(content):
        queue.add(name)


def class_event(controller: ContentController | None, event: Mapping[str, Any]) -> None:
    if controller is None:
        return
    if event.get("type") == "DELETED":
        controller.classes.remove(event["object"])
    else:
        controller.classes.store(event["object"])
