"""The claim's status writes of the resizer and the modifier, re-built on a lost race.

A status patch is built from the claim as read (its conditions list is replaced whole) and
carries that claim's resourceVersion, so a claim written meanwhile (kubelet's capacity after a
node expansion, another controller, our own other queue) answers 409. That is a lost race, not
a failure: the claim is read again and the patch built again from the fresh copy, at once and
quietly, instead of an event, a warning and a second ControllerExpandVolume for a volume that
was already expanded.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import structlog

from kopf_csi import kube

__all__ = ["patch_claim_status"]

log = structlog.get_logger("kopf_csi.resizing")
Body = Mapping[str, Any]


async def patch_claim_status(
    api: kube.KubeClient, claim: Body, build: Callable[[Body], Mapping[str, Any]]
) -> Body:
    """Send `build(claim)` to the claim's status; on a lost race, re-read and re-build.

    NotFoundError when the claim is gone; the last StaleWriteError if every attempt lost.
    """
    meta = claim["metadata"]
    name, namespace = meta["name"], meta["namespace"]

    async def write(current: Body) -> Body:
        return await api.patch(kube.CLAIMS, name, build(current), namespace, subresource="status")

    async def read() -> Body | None:
        log.debug("claim_status_raced", claim=f"{namespace}/{name}")
        return await api.get(kube.CLAIMS, name, namespace)

    return await kube.retry_on_conflict(write, claim, read=read)
