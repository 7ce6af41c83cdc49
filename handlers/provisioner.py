"""external-provisioner as kopf handlers: claims become volumes, released volumes are deleted.

Thin on purpose. kopf's watches (through `kopf_csi_handlers.caches`, `runtime.subscribe`) feed the
caches and two work queues (claims, volumes), as the Go library's informers feed its two
queues; the operations live in `kopf_csi.provisioning.operations`. Watch events write nothing
on the objects (no kopf annotations on users' claims), and the queues do the retrying: 1 s
doubling to 5 min per key, forever while the object lives, as the Go sidecar with
`FailedProvisionThreshold(0)`.

One controller, two kinds of back end: the CSI driver's (when there is one), and each
provisioner a handler module registers (`kopf_csi.provisioning.backends.register_provisioner`),
each with its own queues, journal, events and field manager, and, with `--leader-election`, its
own Lease. The memo keeps them in `served_provisioners`; the CSI one is also `memo.provisioner`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import kopf
import structlog

from kopf_csi import events, kube, metrics, names, runtime
from kopf_csi.caches import object_key
from kopf_csi.provisioning.backends import STARTER_KEY, Registration, registered_provisioners
from kopf_csi.provisioning.errors import ProvisioningError
from kopf_csi.provisioning.hooks import create_volume_hooks
from kopf_csi.provisioning.journal import Journal, journal_name
from kopf_csi.provisioning.naming import provisioner_identity
from kopf_csi.provisioning.operations import Provisioner
from kopf_csi.provisioning.reservations import reservations
from kopf_csi.provisioning.sources import data_source
from kopf_csi.provisioning.sourcing import SNAPSHOT_KEY_PREFIX
from kopf_csi.queueing import WorkQueue

log = structlog.get_logger("kopf_csi.provisioner")

SNAPSHOT_SWEEP_INTERVAL = 300.0  # seconds: `--snapshot-orphan-sweep-interval` (5m)


@dataclasses.dataclass
class Served:
    """One provisioner name served: its controller and its work queues."""

    provisioner: Provisioner
    claims: WorkQueue[str]
    volumes: WorkQueue[str]
    sources: WorkQueue[str]
    sweeper: asyncio.Task[None] | None = None


@kopf.on.startup(id="provisioner.start")
async def start(memo: kopf.Memo, **_: Any) -> None:
    settings = runtime.settings_from_memo(memo)
    memo.served_provisioners = {}
    with_driver = await runtime.wait_for_driver(memo)
    # Users' back ends: those registered already, and any registered later, at once.
    for registration in registered_provisioners(memo):
        _start_backend(memo, registration)
    memo[STARTER_KEY] = functools.partial(_start_backend, memo)
    if not with_driver:
        return
    if not memo.driver.has_controller("CREATE_DELETE_VOLUME"):
        raise kopf.PermanentError("the CSI driver does not support CREATE_DELETE_VOLUME")
    api = memo.api.as_manager(names.MANAGER_PROVISIONER)
    provisioner = Provisioner(
        csi_client=memo.csi,
        api=api,
        recorder=memo.recorder,
        caches=memo.caches,
        driver=memo.driver,
        options=settings.provisioner,
        identity=provisioner_identity(
            driver_name=memo.driver.name,
            millis=int(time.time() * 1000),
            random_number=random.randrange(10000),
        ),
        journal=_journal(memo, api, memo.driver.name),
        observer=metrics.from_memo(memo),
        hooks=create_volume_hooks(memo),  # the same list users' modules append to, in any order
        reservations=reservations(memo),  # the hooks' holds (`context.reserve`)
    )
    served = _serve(memo, provisioner)
    memo.provisioner = provisioner
    memo.claims_queue, memo.volumes_queue = served.claims, served.volumes
    memo.sources_queue = served.sources
    if memo.driver.has_controller("CREATE_DELETE_SNAPSHOT"):
        served.sweeper = runtime.supervise(
            memo, _sweep(provisioner, SNAPSHOT_SWEEP_INTERVAL), name="snapshot-sweeper"
        )
    await _run(memo, served)


def _journal(memo: kopf.Memo, api: kube.KubeClient, name: str) -> Journal:
    namespace = runtime.settings_from_memo(memo).kube.namespace
    journal = Journal(api, namespace=namespace, name=journal_name(name))
    metrics.from_memo(memo).watch_journal(journal)  # its records, their wait, its writes
    return journal


def _start_backend(memo: kopf.Memo, registration: Registration) -> None:
    """Serve a registered back end: subscribed now (before kopf's watches start), working once
    its Lease is ours (with `--leader-election`: the Go library's Lease, the name with `/` as
    `-`), in a task of its own."""
    name = registration.name
    if name in memo.served_provisioners or name == getattr(memo.get("driver"), "name", None):
        raise kopf.PermanentError(f"the provisioner {name!r} is served already")
    api = memo.api.as_manager(registration.manager)
    provisioner = Provisioner(
        api=api,
        recorder=events.Recorder(api, component=events.component_name(name)),
        caches=memo.caches,
        options=runtime.settings_from_memo(memo).provisioner,
        journal=_journal(memo, api, name),
        observer=metrics.from_memo(memo),
        backend=registration.provisioner,
        name=name,
    )
    served = _serve(memo, provisioner)
    late = runtime.is_started(memo)  # the watch has passed on the claims that exist already
    log.info("provisioner_registered", provisioner=name, late=late)

    async def run() -> None:
        if runtime.settings_from_memo(memo).leader_election.enabled:
            # The Go library's lock name, unlike external-provisioner's: not sanitized further.
            lease = name.replace("/", "-")
            await runtime.elect(memo, leases={lease: registration.manager})
        await _run(memo, served, list_claims=late)

    task = runtime.supervise(memo, run(), name=f"provisioner-{name}")
    memo.stoppers.append(_cancel_start(task))


def _serve(memo: kopf.Memo, provisioner: Provisioner) -> Served:
    """The work queues of one provisioner, fed by the watches from now on (not started yet)."""
    options = runtime.settings_from_memo(memo).provisioner
    workers = runtime.settings_from_memo(memo).workers.provisioner

    def queue(name: str, process: Callable[[str], Awaitable[Any]], count: int) -> WorkQueue[str]:
        return WorkQueue(
            name=name if provisioner.csi_backend else f"{name}-{provisioner.name}",
            process=process,
            workers=count,
            backoff_start=options.retry_interval_start,
            backoff_max=options.retry_interval_max,
            observer=metrics.from_memo(memo),
        )

    served = Served(
        provisioner,
        claims=queue("claims", provisioner.sync_claim, workers),
        volumes=queue("volumes", provisioner.reclaimer.sync_volume, workers),
        # external-provisioner's CloningProtectionController (`--cloning-protection-threads` 1).
        sources=queue("clone-sources", provisioner.sources.sync_source, 1),
    )
    memo.served_provisioners[provisioner.name] = served
    runtime.subscribe(memo, kube.CLAIMS, _claim_changed(memo, served))
    runtime.subscribe(memo, kube.VOLUMES, _volume_changed(served))
    runtime.subscribe(memo, kube.VOLUME_ATTACHMENTS, _attachment_changed(memo, served))
    return served


async def _run(memo: kopf.Memo, served: Served, *, list_claims: bool = False) -> None:
    """Start the queues, with the primed volumes and the claims the journal says are unfinished.

    With `list_claims` (a back end registered after start-up, which missed the claims the
    watch passed on before it subscribed), every claim is listed once: they would wait for a
    change otherwise.
    """
    served.claims.start()
    served.volumes.start()
    served.sources.start()
    memo.stoppers.append(_stopper(served))
    for volume in memo.caches.volumes:  # the primed cache: finalizers and pending deletions
        served.volumes.add(object_key(volume))
    for key in await _resume(served.provisioner):  # claims whose CreateVolume may have run
        served.claims.add(key)
    if list_claims:
        await _list_claims(memo, served)


async def _list_claims(memo: kopf.Memo, served: Served, *, delay: float = 0.2) -> None:
    """Pass every claim to this provisioner's listener, as the watch would have; retried."""
    changed = _claim_changed(memo, served)
    while True:
        try:
            async for page in memo.api.pages(kube.CLAIMS):
                for claim in page:
                    changed(claim, False)
        except kube.REQUEST_ERRORS as exc:
            log.warning("claims_list_retry", provisioner=served.provisioner.name, error=str(exc))
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)
        else:
            return


def _cancel_start(task: asyncio.Task[None]) -> Callable[[], Awaitable[None]]:
    async def stop() -> None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    return stop


async def _resume(provisioner: Provisioner, *, delay: float = 0.2) -> list[str]:
    """`provisioner.resume()`, retried until the API answers.

    An API error escaping here would fail the start-up handler: kopf re-runs it only a minute
    later, and then over the queues this run has started already (found by the chaos suite).
    """
    while True:
        try:
            return await provisioner.resume()
        except kube.REQUEST_ERRORS as exc:
            log.warning("journal_resume_retry", error=str(exc), delay=delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)


def _stopper(served: Served) -> Callable[[], Awaitable[None]]:
    """Stop the queues, then flush the journal: run by `lifecycle` before it closes clients."""

    async def stop() -> None:
        if served.sweeper is not None:
            served.sweeper.cancel()
        await served.sources.stop(grace=5.0)
        await served.claims.stop(grace=5.0)
        await served.volumes.stop(grace=5.0)
        try:
            if served.provisioner.journal is not None:
                await served.provisioner.journal.close()
        except Exception as exc:
            # Only removals can be pending here; the next start re-checks every record.
            log.warning("journal_not_flushed", error=str(exc))

    return stop


def _watch_clone_sources(
    memo: kopf.Memo, served: Served, key: str, claim: Mapping[str, Any]
) -> None:
    """Re-check a protected source PVC when it is deleting, or when a clone of it changes."""
    meta = claim.get("metadata", {})
    if names.FINALIZER_CLONING_PROTECTION in (meta.get("finalizers") or ()):
        served.sources.add(key)
    source = claim.get("spec", {}).get("dataSource") or {}
    if source.get("kind") == names.KIND_PERSISTENT_VOLUME_CLAIM and source.get("name"):
        source_key = f"{meta.get('namespace')}/{source['name']}"
        protected = memo.caches.claims.get(source_key)
        if protected is not None and protected["metadata"].get("deletionTimestamp"):
            served.sources.add(source_key)


def _watch_snapshot_source(served: Served, claim: Mapping[str, Any]) -> None:
    """A deleted claim that restored from a snapshot: release the snapshot if no claim needs it."""
    try:
        reference = data_source(claim)
    except ProvisioningError:
        return  # a cross-namespace reference: never protected here
    if reference is not None and reference.kind == names.KIND_VOLUME_SNAPSHOT:
        served.sources.add(f"{SNAPSHOT_KEY_PREFIX}{reference.namespace}/{reference.name}")


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


def _claim_changed(memo: kopf.Memo, served: Served) -> runtime.Listener:
    provisioner = served.provisioner

    def changed(claim: dict[str, Any], deleted: bool) -> None:
        key = object_key(claim)
        bound = bool(claim.get("spec", {}).get("volumeName")) and key not in provisioner.in_progress
        # Only claims with work ahead are cached: the unbound ones, and protected clone sources.
        # Bound claims are most of a cluster and nothing reads them (docs/benchmarks.md).
        # (The shared cache: every served provisioner stores the same, its own claims or not.)
        finalizers = claim["metadata"].get("finalizers") or ()
        protected = names.FINALIZER_CLONING_PROTECTION in finalizers
        if deleted or (bound and not protected and not _in_progress_elsewhere(memo, key)):
            memo.caches.claims.remove(claim)
        else:
            memo.caches.claims.store(claim)
        if provisioner.csi_backend is not None:  # data-source protection is the CSI path's
            _watch_clone_sources(memo, served, key, claim)
            if deleted:
                _watch_snapshot_source(served, claim)
                provisioner.reservations.release(claim["metadata"].get("uid", ""))
        if deleted:
            provisioner.claim_deleted(key, claim)
        if bound:
            return  # nothing to provision (the Go library's first check, done before queueing)
        served.claims.add(key)

    return changed


def _in_progress_elsewhere(memo: kopf.Memo, key: str) -> bool:
    return any(key in s.provisioner.in_progress for s in memo.served_provisioners.values())


def _attachment_changed(memo: kopf.Memo, served: Served) -> runtime.Listener:
    """A VolumeAttachment gone: its volume, if released and waiting for the detach, is deleted
    now, not at its next retry (external-provisioner waits for the retry, up to 5 minutes)."""

    def changed(attachment: dict[str, Any], deleted: bool) -> None:
        if not deleted:
            return
        name = ((attachment.get("spec") or {}).get("source") or {}).get("persistentVolumeName")
        if name and name in memo.caches.volumes:
            served.volumes.add(name)

    return changed


def _volume_changed(served: Served) -> runtime.Listener:
    def changed(volume: dict[str, Any], deleted: bool) -> None:  # the cache is current already
        if deleted:
            served.volumes.discard(object_key(volume))
            served.provisioner.reclaimer.forget(volume)
            return
        served.volumes.add(object_key(volume))

    return changed
