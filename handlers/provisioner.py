"""external-provisioner as kopf handlers: claims become volumes, released volumes are deleted.

Thin on purpose. kopf's watches (through `handlers.caches`, `runtime.subscribe`) feed the
caches and two work queues (claims, volumes), as the Go library's informers feed its two
queues; the operations live in `kopf_csi.provisioning.operations`. Watch events write nothing
on the objects (no kopf annotations on users' claims), and the queues do the retrying: 1 s
doubling to 5 min per key, forever while the object lives, as the Go sidecar with
`FailedProvisionThreshold(0)`.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import aiohttp
import kopf
import structlog

from kopf_csi import kube, metrics, names, runtime
from kopf_csi.caches import object_key
from kopf_csi.provisioning.errors import ProvisioningError
from kopf_csi.provisioning.hooks import create_volume_hooks
from kopf_csi.provisioning.journal import Journal, journal_name
from kopf_csi.provisioning.naming import provisioner_identity
from kopf_csi.provisioning.operations import Provisioner
from kopf_csi.provisioning.sources import data_source
from kopf_csi.provisioning.sourcing import SNAPSHOT_KEY_PREFIX
from kopf_csi.queueing import WorkQueue

log = structlog.get_logger("kopf_csi.provisioner")

SNAPSHOT_SWEEP_INTERVAL = 300.0  # seconds: `--snapshot-orphan-sweep-interval` (5m)


@kopf.on.startup(id="provisioner.start")
async def start(memo: kopf.Memo, **_: Any) -> None:
    settings = runtime.settings_from_memo(memo)
    await runtime.wait_for_driver(memo, timeout=settings.csi.connect_timeout + 10)
    if not memo.driver.has_controller("CREATE_DELETE_VOLUME"):
        raise kopf.PermanentError("the CSI driver does not support CREATE_DELETE_VOLUME")
    options = settings.provisioner
    api = memo.api.as_manager(names.MANAGER_PROVISIONER)
    journal = Journal(api, namespace=settings.kube.namespace, name=journal_name(memo.driver.name))
    provisioner = Provisioner(
        csi_client=memo.csi,
        api=api,
        recorder=memo.recorder,
        caches=memo.caches,
        driver=memo.driver,
        options=options,
        identity=provisioner_identity(
            driver_name=memo.driver.name,
            millis=int(time.time() * 1000),
            random_number=random.randrange(10000),
        ),
        journal=journal,
        observer=metrics.from_memo(memo),
        hooks=create_volume_hooks(memo),  # the same list users' modules append to, in any order
    )
    memo.provisioner = provisioner
    memo.claims_queue = WorkQueue(
        name="claims",
        process=provisioner.sync_claim,
        workers=settings.workers.provisioner,
        backoff_start=options.retry_interval_start,
        backoff_max=options.retry_interval_max,
        observer=metrics.from_memo(memo),
    )
    memo.volumes_queue = WorkQueue(
        name="volumes",
        process=provisioner.reclaimer.sync_volume,
        workers=settings.workers.provisioner,
        backoff_start=options.retry_interval_start,
        backoff_max=options.retry_interval_max,
        observer=metrics.from_memo(memo),
    )
    # external-provisioner's CloningProtectionController (`--cloning-protection-threads` 1).
    memo.sources_queue = WorkQueue(
        name="clone-sources",
        process=provisioner.sources.sync_source,
        workers=1,
        backoff_start=options.retry_interval_start,
        backoff_max=options.retry_interval_max,
        observer=metrics.from_memo(memo),
    )
    memo.claims_queue.start()
    memo.volumes_queue.start()
    memo.sources_queue.start()
    memo.sweeper = None
    if memo.driver.has_controller("CREATE_DELETE_SNAPSHOT"):
        memo.sweeper = asyncio.create_task(_sweep(provisioner, SNAPSHOT_SWEEP_INTERVAL))
    memo.stoppers.append(_stopper(memo))
    runtime.subscribe(memo, kube.CLAIMS, _claim_changed(memo))
    runtime.subscribe(memo, kube.VOLUMES, _volume_changed(memo))
    for volume in memo.caches.volumes:  # the primed cache: finalizers and pending deletions
        memo.volumes_queue.add(object_key(volume))
    for key in await _resume(provisioner):  # claims whose CreateVolume may have run
        memo.claims_queue.add(key)


async def _resume(provisioner: Provisioner, *, delay: float = 0.2) -> list[str]:
    """`provisioner.resume()`, retried until the API answers.

    An API error escaping here would fail the start-up handler: kopf re-runs it only a minute
    later, and then over the queues this run has started already (found by the chaos suite).
    """
    while True:
        try:
            return await provisioner.resume()
        except (kube.KubeError, aiohttp.ClientError, OSError) as exc:
            log.warning("journal_resume_retry", error=str(exc), delay=delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)


def _stopper(memo: kopf.Memo) -> Callable[[], Awaitable[None]]:
    """Stop the queues, then flush the journal: run by `lifecycle` before it closes clients."""

    async def stop() -> None:
        if memo.sweeper is not None:
            memo.sweeper.cancel()
        await memo.sources_queue.stop(grace=5.0)
        await memo.claims_queue.stop(grace=5.0)
        await memo.volumes_queue.stop(grace=5.0)
        try:
            await memo.provisioner.journal.close()
        except Exception as exc:
            # Only removals can be pending here; the next start re-checks every record.
            log.warning("journal_not_flushed", error=str(exc))

    return stop


def _watch_clone_sources(memo: kopf.Memo, key: str, claim: Mapping[str, Any]) -> None:
    """Re-check a protected source PVC when it is deleting, or when a clone of it changes."""
    meta = claim.get("metadata", {})
    if names.FINALIZER_CLONING_PROTECTION in (meta.get("finalizers") or ()):
        memo.sources_queue.add(key)
    source = claim.get("spec", {}).get("dataSource") or {}
    if source.get("kind") == names.KIND_PERSISTENT_VOLUME_CLAIM and source.get("name"):
        source_key = f"{meta.get('namespace')}/{source['name']}"
        protected = memo.caches.claims.get(source_key)
        if protected is not None and protected["metadata"].get("deletionTimestamp"):
            memo.sources_queue.add(source_key)


def _watch_snapshot_source(memo: kopf.Memo, claim: Mapping[str, Any]) -> None:
    """A deleted claim that restored from a snapshot: release the snapshot if no claim needs it."""
    try:
        reference = data_source(claim)
    except ProvisioningError:
        return  # a cross-namespace reference: never protected here
    if reference is not None and reference.kind == names.KIND_VOLUME_SNAPSHOT:
        memo.sources_queue.add(f"{SNAPSHOT_KEY_PREFIX}{reference.namespace}/{reference.name}")


async def _sweep(provisioner: Provisioner, interval: float) -> None:
    """`--snapshot-orphan-sweep-interval`: release snapshot protection no claim needs."""
    while True:
        await asyncio.sleep(interval)
        try:
            released = await provisioner.sources.sweep_snapshot_sources()
        except kube.KubeError as exc:  # e.g. no snapshot CRDs in this cluster
            log.debug("snapshot_sweep_skipped", error=str(exc))
        else:
            if released:
                log.info("snapshot_sources_released", count=released)


def _claim_changed(memo: kopf.Memo) -> runtime.Listener:
    def changed(claim: dict[str, Any], deleted: bool) -> None:
        key = object_key(claim)
        provisioner: Provisioner = memo.provisioner
        bound = bool(claim.get("spec", {}).get("volumeName")) and key not in provisioner.in_progress
        # Only claims with work ahead are cached: the unbound ones, and protected clone sources.
        # Bound claims are most of a cluster and nothing reads them (docs/benchmarks.md).
        finalizers = claim["metadata"].get("finalizers") or ()
        protected = names.FINALIZER_CLONING_PROTECTION in finalizers
        if deleted or (bound and not protected):
            memo.caches.claims.remove(claim)
        else:
            memo.caches.claims.store(claim)
        _watch_clone_sources(memo, key, claim)
        if deleted:
            _watch_snapshot_source(memo, claim)
        if bound:
            return  # nothing to provision (the Go library's first check, done before queueing)
        memo.claims_queue.add(key)

    return changed


def _volume_changed(memo: kopf.Memo) -> runtime.Listener:
    def changed(volume: dict[str, Any], deleted: bool) -> None:  # the cache is current already
        if deleted:
            memo.volumes_queue.discard(object_key(volume))
            memo.provisioner.reclaimer.forget(volume)
            return
        memo.volumes_queue.add(object_key(volume))

    return changed
