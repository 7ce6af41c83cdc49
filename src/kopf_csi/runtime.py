"""The kopf glue: our settings and outcomes in kopf's terms. The only library module importing kopf.

Handler modules call these helpers so that they stay thin and so that the names kopf writes
onto core objects (annotations, finalizers) are ours and stable.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import inspect
import os
import signal
import time
from collections.abc import Awaitable, Callable
from typing import Any

import kopf
import structlog

from kopf_csi import flags, heap, kube, leadership, logs
from kopf_csi.caches import Caches
from kopf_csi.settings import Settings, SettingsError

__all__ = [
    "ANNOTATIONS_PREFIX",
    "STARTED_HANDLER_ID",
    "WORKER_IDLE_TIMEOUT",
    "NotStarted",
    "ObjectMemo",
    "OperatorMemo",
    "StartupFailure",
    "all_started",
    "caches_from_memo",
    "configure_kopf",
    "connection_info",
    "elect",
    "is_standby",
    "is_started",
    "lead",
    "logs_in",
    "mark_started",
    "notify",
    "request_stop",
    "settings_from_memo",
    "startup_failures",
    "startup_handler_ids",
    "stop_work",
    "subscribe",
    "supervise",
    "wait_for_driver",
    "watch_startup",
]

WORKER_IDLE_TIMEOUT = 0.1
"""Seconds a per-object kopf worker waits for the object's next event before it exits."""

STARTED_HANDLER_ID = "kopf-csi.started"
"""The start-up handler registered after every module's (`modules.load`): `mark_started`."""

ANNOTATIONS_PREFIX = "kopf-csi.kopf.dev"
"""Where kopf keeps its progress on our objects: `kopf-csi.kopf.dev/<handler id>`."""

# Every handler module imports this one: under `kopf run`, our lines follow kopf's logging.
logs.follow_kopf()


def configure_kopf(settings: kopf.OperatorSettings, *, registry: Any = None) -> None:
    """Use our own annotation names (never kopf's defaults) on the core objects we touch.

    When no handler in the registry reacts to changes (create/update/delete/resume), as with
    our own modules, which only watch events, kopf's diff-base is never used; kopf still builds
    it (two deep copies and a diff of every object, on every watch event), a fifth of the
    operator's CPU per volume (docs/benchmarks.md). Then it gets a storage that builds nothing.
    A user's module with change handlers keeps the real one.
    """
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(
        prefix=ANNOTATIONS_PREFIX
    )
    storage_class = (
        kopf.AnnotationsDiffBaseStorage if _has_change_handlers(registry) else _NoDiffBase
    )
    settings.persistence.diffbase_storage = storage_class(
        prefix=ANNOTATIONS_PREFIX, key="last-handled-configuration"
    )
    settings.persistence.finalizer = f"{ANNOTATIONS_PREFIX}/finalizer"
    # Paginated LISTs when a watch starts: one page of objects in memory at a time, not a
    # whole cluster's worth of PVs parsed at once (the start-up peak, docs/benchmarks.md).
    settings.watching.chunk_size = kube.LIST_PAGE_SIZE
    # kopf keeps a worker (a task, its queue, the object's last body) per object until it has
    # been idle this long (5 s by default). At start-up every PV and claim gets one at once:
    # with 10,000 of each, that alone held 130 MiB at the peak (docs/benchmarks.md).
    settings.queueing.idle_timeout = WORKER_IDLE_TIMEOUT
    settings.posting.level = 20  # INFO: Normal events too, not only warnings
    # No runtime observation of CRDs (and of namespaces, which kopf skips anyway when serving
    # the whole cluster): it needs `list`/`watch` on every CustomResourceDefinition, and all it
    # would add is starting a watch for a snapshot CRD installed after us, which the
    # snapshotter would not use (it decides at start-up). Resources are found once, at
    # start-up; install the snapshot CRDs first, or restart the operator after them
    # (docs/operations.md, "RBAC").
    settings.scanning.disabled = True
    # kopf gives up a request after 8 retries (54 s) and raises: a watch then ends for good,
    # or the operator stops. A control-plane restart can take longer; client-go retries for
    # ever. So does kopf here, every 10 s at most (`logs.OutageRetries` keeps it quiet).
    settings.networking.error_backoffs = _RetryForever()
    logs.quiet_outage_retries()


class _RetryForever:
    """kopf's request backoffs, without end: 1, 1, 2, 3, 5, 8, then 10 s for ever (not
    `Sized`, so kopf counts no last attempt). Iterable again for every request."""

    def __iter__(self) -> Any:
        yield from (1.0, 1.0, 2.0, 3.0, 5.0, 8.0)
        while True:
            yield 10.0


class NotStarted(kopf.PermanentError):
    """A controller did not start because `lifecycle.connect` failed: that failure is the one
    to report (`kopf-csi run` names it alone, and `logs.ReportedFailures` quiets these)."""


def settings_from_memo(memo: Any) -> Settings:
    """The settings an entry point put into the memo, or the environment's under `kopf run`."""
    settings = getattr(memo, "settings", None)
    if isinstance(settings, Settings):
        return settings
    try:
        settings = flags.from_env(os.environ)
    except SettingsError as exc:
        # A bad variable is final, as a bad flag is for `kopf-csi run` (exit code 2): kopf would
        # retry the start-up handler with the same value every minute, for ever.
        raise kopf.PermanentError(str(exc)) from None
    memo.settings = settings
    return settings


async def connection_info(settings: Settings) -> kopf.ConnectionInfo:
    """Log in once with kubernetes-asyncio and give kopf the same credentials."""
    creds = await kube.login(settings.kube.kubeconfig)
    return kopf.ConnectionInfo(**dataclasses.asdict(creds))


def caches_from_memo(memo: Any) -> Caches:
    """The shared caches `lifecycle.connect` created (before any watch starts)."""
    caches = getattr(memo, "caches", None)
    if not isinstance(caches, Caches):
        raise kopf.PermanentError("the caches are missing: load kopf_csi_handlers.lifecycle")
    return caches


CONNECT_MARGIN = 10.0
"""Seconds a controller waits for `lifecycle.connect` beyond the driver's own connect wait."""


async def wait_for_driver(memo: Any, *, timeout: float | None = None) -> bool:
    """Let a controller's start-up wait for `lifecycle.connect`, or fail at once if it failed.

    True once the driver is connected (`memo.driver`); False when the operator runs without a
    CSI driver (`--no-csi`): the CSI controllers then stay idle. A standby replica (leader
    election) waits for as long as another replica leads: the timeout counts only while it is
    not waiting for its Leases. The timeout is the settings' `--csi-connect-timeout` plus
    `CONNECT_MARGIN` unless given.
    """
    if timeout is None:
        timeout = settings_from_memo(memo).csi.connect_timeout + CONNECT_MARGIN
    deadline = time.monotonic() + timeout
    while getattr(memo, "driver", None) is None:
        if getattr(memo, "without_driver", False):
            _log.info("controller_idle", reason="no CSI driver (--no-csi)")
            return False
        failed = getattr(memo, "connect_error", None)
        if failed is not None:
            raise NotStarted(f"not started, lifecycle.connect failed: {failed}")
        if is_standby(memo):
            deadline = time.monotonic() + timeout
        elif time.monotonic() > deadline:
            raise kopf.PermanentError(
                f"the CSI driver was not connected within {timeout:g}s:"
                " load kopf_csi_handlers.lifecycle"
            )
        await asyncio.sleep(0.02)
    return True


async def mark_started(memo: Any, **_: Any) -> None:
    """The last start-up handler (kopf runs them one by one, in order): all others have run.
    The start-up heap is frozen (`kopf_csi.heap`): no full GC pass scans it during a burst;
    and from now on the C heap's free pages are given back every minute (`heap.Trimmer`), and
    its large blocks are mapped on their own (`heap.fix_mmap_threshold`)."""
    frozen = heap.freeze_startup()
    mapped = heap.fix_mmap_threshold()
    stoppers = getattr(memo, "stoppers", None)
    if isinstance(stoppers, list):
        stoppers.insert(0, heap.thaw)  # stoppers run in reverse: this one last
        trimmer = memo.heap_trimmer = heap.Trimmer()
        trimmer.start()
        stoppers.append(trimmer.stop)
    _log.debug("startup_heap_frozen", objects=frozen, large_blocks_mapped=mapped)
    _started(memo).set()


async def all_started(memo: Any) -> None:
    """Return once every start-up handler has run, as when kopf starts its watches; at once
    if `mark_started` is not registered (modules loaded by something else than
    `modules.load`: nothing would ever say so)."""
    if STARTED_HANDLER_ID in startup_handler_ids(memo):
        await _started(memo).wait()


def is_started(memo: Any) -> bool:
    """Every start-up handler has run: the watches are passing events on already."""
    return _started(memo).is_set()


def _started(memo: Any) -> asyncio.Event:
    event = getattr(memo, "all_started", None)
    if not isinstance(event, asyncio.Event):
        event = memo.all_started = asyncio.Event()
    return event


Listener = Callable[[Any, bool], "Awaitable[None] | None"]
"""A controller's callback for one kind's watch events: `(body, deleted)`."""


def subscribe(memo: Any, resource: kube.Resource, listener: Listener) -> None:
    """Have `kopf_csi_handlers.caches` pass every watch event of `resource` to `listener`.

    One kopf handler per kind (in `kopf_csi_handlers.caches`) feeds the shared cache and every
    controller, instead of one kopf handler per controller and kind: kopf's cost per handler
    invocation, paid by three controllers on every PV event, was a tenth of the CPU per volume.
    Controllers subscribe in their start-up handlers, which kopf runs before any watch starts.
    """
    listeners: dict[tuple[str, str], list[Listener]] = memo.setdefault("listeners", {})
    listeners.setdefault((resource.group, resource.plural), []).append(listener)


async def notify(memo: Any, resource: kube.Resource, obj: Any, *, deleted: bool) -> None:
    """Pass one watch event to every listener of its kind; one listener's failure is logged,
    and the others still get the event."""
    listeners = (getattr(memo, "listeners", None) or {}).get((resource.group, resource.plural))
    for listener in listeners or ():
        try:
            result = listener(obj, deleted)
            if result is not None:
                await result
        except Exception as exc:  # a bug in one controller must not starve the others
            _log.exception(
                "listener_failed", listener=getattr(listener, "__qualname__", repr(listener)),
                resource=resource.plural, obj=obj, error=repr(exc),
            )  # fmt: skip


class OperatorMemo(kopf.Memo):
    """The operator-wide memo (`memo.settings`, `memo.csi`, `memo.caches`, ...).

    kopf gives every object it sees a shallow copy of the memo (`copy.copy`). With thirty-odd
    entries here, the copies of 20,000 PVs and claims took 15 MiB. A copy of this memo is an
    `ObjectMemo` instead: empty, reading through to this one, keeping its own writes, which is
    what a per-object shallow copy means to a handler, at a fraction of the size.
    """

    def __copy__(self) -> ObjectMemo:
        return ObjectMemo(self)


class ObjectMemo(kopf.Memo):
    """One object's memo: its own entries first, then the operator's (a two-level ChainMap)."""

    def __init__(self, parent: kopf.Memo, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        object.__setattr__(self, "_parent", parent)

    def __missing__(self, key: Any) -> Any:  # self[key], and kopf's attribute access
        return self._parent[key]

    def __getattr__(self, key: str) -> Any:
        if key == "_parent":
            raise AttributeError(key)
        return super().__getattr__(key)

    def __contains__(self, key: object) -> bool:
        return dict.__contains__(self, key) or key in self._parent

    def get(self, key: Any, default: Any = None) -> Any:
        return self[key] if key in self else default  # noqa: SIM401 (this *is* get)

    def setdefault(self, key: Any, default: Any = None) -> Any:
        if key not in self:
            self[key] = default
        return self[key]

    def _merged(self) -> dict[Any, Any]:
        return {**self._parent, **dict(dict.items(self))}

    def keys(self) -> Any:
        return self._merged().keys()

    def values(self) -> Any:
        return self._merged().values()

    def items(self) -> Any:
        return self._merged().items()

    def __iter__(self) -> Any:
        return iter(self._merged())

    def __len__(self) -> int:
        return len(self._merged())

    def __copy__(self) -> ObjectMemo:
        return ObjectMemo(self._parent, dict.items(self))

    def __repr__(self) -> str:
        return f"ObjectMemo({dict.__repr__(self)}, parent={len(self._parent)} entries)"


class _NoDiffBase(kopf.AnnotationsDiffBaseStorage):
    """Diff-base storage for registries without change handlers: nothing to build or fetch."""

    def build(self, *, body: Any, extra_fields: Any = None) -> Any:
        return {}

    def fetch(self, *, body: Any) -> None:
        return None


def _has_change_handlers(registry: Any) -> bool:
    """Whether any create/update/delete/resume handler is registered (kopf private API)."""
    if registry is None:
        registry = kopf.get_default_registry()
    changing = getattr(registry, "_changing", None)
    return changing is None or bool(changing.get_all_handlers())


# -- start-up failures ------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class StartupFailure:
    """A module's start-up handler raised: kopf retries it (every 60 s by default), and no
    watch starts until it succeeds. `/readyz` fails with it; the testing kit raises it."""

    module: str
    handler: str
    error: BaseException

    @property
    def retry_asked(self) -> bool:
        """The handler asked for a retry (`kopf.TemporaryError`): waiting, not broken."""
        return isinstance(self.error, kopf.TemporaryError)

    def __str__(self) -> str:
        return (
            f"the start-up handler {self.handler!r} of module {self.module} failed: "
            f"{type(self.error).__name__}: {self.error}"
        )


def startup_failures(memo: Any) -> dict[str, StartupFailure]:
    """The start-up handlers failing now, by handler id, the first failure first (a copy)."""
    return dict(getattr(memo, "startup_failures", None) or {})


def watch_startup(fn: Callable[..., Any], *, module: str, handler: str) -> Callable[..., Any]:
    """`fn`, a start-up handler of `module`, keeping its failures in `memo.startup_failures`
    until it succeeds (`modules.load` wraps every module's). Async stays async and a plain
    `def` stays plain (kopf runs it in a thread, and looks through `__wrapped__`)."""

    def failed(memo: Any, error: BaseException) -> None:
        if memo is None:
            return
        failures = getattr(memo, "startup_failures", None)
        if failures is None:
            failures = memo.startup_failures = {}
        failures[handler] = StartupFailure(module=module, handler=handler, error=error)

    def succeeded(memo: Any) -> None:
        (getattr(memo, "startup_failures", None) or {}).pop(handler, None)

    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def watched_async(**kwargs: Any) -> Any:
            try:
                result = await fn(**kwargs)
            except Exception as exc:
                failed(kwargs.get("memo"), exc)
                raise
            succeeded(kwargs.get("memo"))
            return result

        return watched_async

    @functools.wraps(fn)
    def watched(**kwargs: Any) -> Any:
        try:
            result = fn(**kwargs)
        except Exception as exc:
            failed(kwargs.get("memo"), exc)
            raise
        succeeded(kwargs.get("memo"))
        return result

    return watched


# -- leader election ---------------------------------------------------------------------------

_log = structlog.get_logger("kopf_csi.runtime")


def is_standby(memo: Any) -> bool:
    """Leader election is on, and another replica leads: connected, waiting for the Leases."""
    elector = getattr(memo, "leadership", None)
    return elector is not None and not elector.is_leader and elector.lost is None


def startup_handler_ids(memo: Any) -> frozenset[str]:
    """The ids of the loaded start-up handlers: which controllers run (kopf private API)."""
    registry = getattr(memo, "registry", None) or kopf.get_default_registry()
    return _activity_handler_ids(registry, "startup")


def logs_in(registry: Any) -> bool:
    """Some loaded module has a login handler (`kopf_csi_handlers.lifecycle` has ours). Without
    one, kopf cannot reach the API at all: its own logins need client libraries we do not use."""
    return bool(_activity_handler_ids(registry, "authentication"))


def _activity_handler_ids(registry: Any, activity: str) -> frozenset[str]:
    handlers = registry._activities.get_all_handlers()  # kopf private API
    return frozenset(str(h.id) for h in handlers if getattr(h.activity, "value", None) == activity)


async def lead(memo: Any, *, driver_name: str) -> None:
    """`--leader-election`: return once this replica holds the Lease of every role it runs.

    Called by `lifecycle.connect` before the caches are primed and `memo.driver` is set, so no
    controller starts (and kopf starts no watch) while another replica leads. It puts into the
    memo: `leadership` (the `leadership.Elector`, or None when leader election is off),
    `health_checks["leader-election"]`, and the Elector's `stop` as the first of the
    `stoppers`, so the Leases are released only once every controller has stopped.
    """
    settings = settings_from_memo(memo)
    memo.leadership = None
    config = settings.leader_election
    if not config.enabled:
        return
    roles = leadership.roles_for(startup_handler_ids(memo), settings)
    if not roles:
        _log.info("leader_election_skipped", reason="no controller module is loaded")
        return

    leases = {role.lease_name(driver_name): role.manager for role in roles}
    await elect(memo, leases=leases)


async def elect(memo: Any, *, leases: dict[str, str]) -> leadership.Elector:
    """Hold `leases` (name → field manager) for good, waiting as long as another replica does.

    The Elector's `stop` goes first into `memo.stoppers` (they run in reverse: it runs last),
    and its check into `memo.health_checks`; losing any Lease stops the work and the operator.
    """
    settings = settings_from_memo(memo)
    config = settings.leader_election

    async def on_lost(reason: str) -> None:
        await stop_work(memo)
        request_stop(memo, f"leader election lost: {reason}")

    try:
        elector = leadership.Elector(
            memo.api,
            leases=list(leases),
            managers=leases,
            namespace=config.namespace or settings.kube.namespace,
            identity=leadership.default_identity(config.identity),
            config=config,
            on_lost=on_lost,
            observers=_leader_gauges(memo),
        )
    except ValueError as exc:
        raise kopf.PermanentError(f"leader election cannot start: {exc}") from exc
    first = getattr(memo, "leadership", None) is None
    if first:  # the operator's (its CSI roles'), else the first provisioner back end's
        memo.leadership = elector
    if getattr(memo, "health_checks", None) is None:
        memo.health_checks = {}
    check = "leader-election" if first else f"leader-election-{elector.leases[0]}"
    memo.health_checks[check] = elector.check
    memo.stoppers.insert(0, elector.stop)  # stoppers run in reverse: this one last
    await elector.acquire()
    elector.start()
    return elector


def _leader_gauges(memo: Any) -> list[Any]:
    """`memo.metrics.leader(lease, leading)`, if present: `leader_election_master_status`."""
    gauge = getattr(getattr(memo, "metrics", None), "leader", None)
    return [gauge] if callable(gauge) else []


async def stop_work(memo: Any) -> None:
    """Run the controllers' stoppers (last registered first), once: queues, loops, journal."""
    stoppers = list(getattr(memo, "stoppers", None) or ())
    if stoppers:
        memo.stoppers.clear()  # `lifecycle.disconnect` then finds nothing left to stop
    for stop in reversed(stoppers):
        try:
            await stop()
        except Exception as exc:
            _log.warning("controller_stop_failed", error=str(exc))


def supervise(memo: Any, coro: Awaitable[Any], *, name: str) -> asyncio.Task[Any]:
    """Run `coro` as a background task that must never end on an error.

    Each loop catches the errors it expects and retries (an API server away included); one
    that escapes anyway is a bug, and a dead loop leaves its work undone while the process runs
    on, healthy to every probe. So it takes the operator down instead: logged with its
    traceback, `/healthz` failing with its name, and the operator stopped with exit code 1, so
    that Kubernetes restarts it. A task that returns, or is cancelled (a stop), is no failure.
    """
    task = asyncio.ensure_future(coro)
    task.set_name(name)

    def ended(task: asyncio.Task[Any]) -> None:
        if task.cancelled() or (error := task.exception()) is None:
            return  # `exception()` also marks it retrieved: never "never retrieved"
        _log.critical("background_task_died", task=name, error=repr(error), exc_info=error)
        if getattr(memo, "health_checks", None) is None:
            memo.health_checks = {}
        memo.health_checks[f"task {name}"] = lambda: (False, f"{name} died: {error!r}")
        request_stop(memo, f"the background task {name} died: {error!r}")

    task.add_done_callback(ended)
    return task


def request_stop(memo: Any, reason: str) -> None:
    """Stop the operator from inside: through the runner's `memo.stop_operator(reason)` if it
    put one there (the CLI, `OperatorThread`), else by SIGTERM to our own process, on which
    kopf stops gracefully (the Go sidecars exit with an error instead)."""
    stop = getattr(memo, "stop_operator", None)
    if callable(stop):
        stop(reason)
    else:
        os.kill(os.getpid(), signal.SIGTERM)
