"""Storage capacity tracking (`--enable-capacity`), as external-provisioner's capacity controller.

Off unless `settings.capacity.enabled`. Every poll interval it works out the (StorageClass,
topology segment) pairs from the caches, asks the driver for each one's capacity, and makes the
CSIStorageCapacity objects in the operator's namespace match: create, update, delete.
"""

from __future__ import annotations

import asyncio
from typing import Any

import kopf
import structlog

from kopf_csi import kube, names, runtime
from kopf_csi.csi import CSIClient, CSIError
from kopf_csi.csi import messages as csi
from kopf_csi.provisioning import capacity

log = structlog.get_logger("kopf_csi.capacity")


@kopf.on.startup(id="capacity.start")
async def start(memo: kopf.Memo, **_: Any) -> None:
    settings = runtime.settings_from_memo(memo)
    if not settings.capacity.enabled:
        return
    if not await runtime.wait_for_driver(memo):
        return
    task = runtime.supervise(memo, _poll(memo, settings.capacity.poll_interval), name="capacity")

    async def stop() -> None:
        task.cancel()

    memo.stoppers.append(stop)


async def _poll(memo: kopf.Memo, interval: float) -> None:
    while True:
        try:
            await sync_capacities(memo)
        except (kube.KubeError, CSIError) as exc:
            log.warning("capacity_sync_failed", error=str(exc))
        await asyncio.sleep(interval)


async def sync_capacities(memo: kopf.Memo) -> None:
    """One round: make the CSIStorageCapacity objects match the driver's answers."""
    settings = runtime.settings_from_memo(memo)
    api: kube.KubeClient = memo.api.as_manager(names.MANAGER_PROVISIONER)
    driver = memo.driver.name
    namespace = settings.kube.namespace
    segments = capacity.segments(
        driver_name=driver, csinodes=memo.caches.csinodes, nodes=memo.caches.nodes
    )
    wants = capacity.wanted(
        driver_name=driver,
        storage_classes=memo.caches.storage_classes,
        segments=segments,
        immediate_binding=settings.capacity.for_immediate_binding,
    )
    selector = f"{capacity.LABEL_DRIVER}={driver},{capacity.LABEL_MANAGED_BY}={capacity.MANAGED_BY}"
    existing = await api.list(kube.CSI_STORAGE_CAPACITIES, namespace, label_selector=selector)
    to_create, to_update, obsolete = capacity.diff(existing, wants)
    for want in to_create:
        body = await _object(memo.csi, want, driver=driver, namespace=namespace)
        await api.create(kube.CSI_STORAGE_CAPACITIES, body)
    for name, want in to_update.items():
        body = await _object(memo.csi, want, driver=driver, namespace=namespace)
        patch = {k: body[k] for k in ("capacity", "maximumVolumeSize") if k in body}
        await api.patch(kube.CSI_STORAGE_CAPACITIES, name, patch, namespace)
    for obj in obsolete:
        await api.delete(kube.CSI_STORAGE_CAPACITIES, obj["metadata"]["name"], namespace)


async def _object(
    client: CSIClient, want: capacity.Want, *, driver: str, namespace: str
) -> dict[str, Any]:
    answer = await client.get_capacity(
        csi.GetCapacityRequest(
            parameters=dict(want.parameters),
            accessible_topology=csi.Topology(segments=dict(want.segment)),
        )
    )
    return capacity.capacity_object(
        want,
        capacity=answer.available_capacity,
        maximum_volume_size=answer.maximum_volume_size,
        driver_name=driver,
        namespace=namespace,
    )
