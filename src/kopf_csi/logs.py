"""Logging: structlog for our records, and the same renderer for stdlib records (kopf's own).

One `configure()` call per process, from an entry point; libraries never configure logging.
JSON lines when not on a terminal (in a cluster), readable console lines on a terminal, or
as `format=` says (`--log-format`). Every record goes through one handler on stderr: ours,
kopf's (`kopf.*`), aiohttp's and kubernetes-asyncio's alike.

Every line about an object carries its identity as four keys: `kind`, `namespace` (namespaced
objects only), `name` and `uid`.

- Our code binds them around the work on one object: `with logs.bound_object(claim): ...`
  (contextvars, so every line of that task, including the CSI client's, carries them), or
  passes the object itself: `log.info("x", obj=volume)`; the `obj` key is expanded here.
- kopf's per-object records carry a `k8s_ref` dict in `extra` (not a stable kopf API, but the
  one there is); it is mapped to the same keys, and kopf's other `extra` fields (its settings
  object, `k8s_skip`) are dropped.

Under kopf's own `kopf run`, which configures stdlib logging before it loads the handler
modules, nothing calls `configure()`: `follow_kopf()` (at the import of `kopf_csi.runtime`)
then sends our records through kopf's handler, in kopf's format and at kopf's level
(`--verbose`, `--debug`, `--quiet`), so that one setting and one format hold for every line.

Values are rendered, never looked into: secrets must not reach a log call in the first place
(`kopf_csi.csi.redaction`).

Info is for what an operator of the cluster wants to read: provisioned, deleted, attached,
failed, and why. kopf logs `Handler '...' succeeded.` at info after every handler call, which
for our watch-event handlers is every watch event (2,400 of 2,914 lines of a 200-claim burst
on a real server); those records are demoted to debug (`PerEventRecords`), as the Go sidecars
log nothing per watch event at their default verbosity.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import re
import sys
import time
import types
from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any, Literal, TextIO

import structlog

from kopf_csi import jsoncodec

__all__ = [
    "FORMATS",
    "NOT_STARTED",
    "PerEventRecords",
    "ReportedFailures",
    "bound_object",
    "configure",
    "expand_object",
    "follow_kopf",
    "formatter",
    "kopf_reference",
    "object_fields",
]

Format = Literal["json", "console"]
FORMATS: tuple[Format, ...] = ("json", "console")
"""The values of `--log-format`."""

OBJECT_KEYS = ("kind", "namespace", "name", "uid")
_KOPF_EXTRAS = ("settings", "k8s_skip")  # kopf's own plumbing, useless (or huge) in a line


def object_fields(obj: Mapping[str, Any], *, kind: str | None = None) -> dict[str, str]:
    """The identity keys of a Kubernetes object body: kind, namespace (if any), name, uid.

    `kind` is for bodies without one (watch events of built-in kinds usually have it; bodies
    built by hand may not). Missing values are left out rather than logged as None.
    """
    meta = obj.get("metadata") or {}
    fields = {
        "kind": kind or obj.get("kind"),
        "namespace": meta.get("namespace"),
        "name": meta.get("name"),
        "uid": meta.get("uid"),
    }
    return {key: str(value) for key, value in fields.items() if value}


@contextlib.contextmanager
def bound_object(obj: Mapping[str, Any], *, kind: str | None = None) -> Iterator[None]:
    """Every line logged inside (by this task) carries the object's identity keys."""
    with structlog.contextvars.bound_contextvars(**object_fields(obj, kind=kind)):
        yield


def expand_object(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Processor: `obj=<body>` becomes its identity keys (explicit keys win)."""
    obj = event.pop("obj", None)
    if isinstance(obj, Mapping):
        for key, value in object_fields(obj).items():
            event.setdefault(key, value)
    elif obj is not None:
        event["obj"] = obj  # not a body: leave it as the caller wrote it
    return event


def kopf_reference(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Processor for stdlib records: kopf's `k8s_ref` extra becomes the identity keys."""
    for key in _KOPF_EXTRAS:
        event.pop(key, None)
    ref = event.pop("k8s_ref", None)
    if isinstance(ref, Mapping):
        for key in OBJECT_KEYS:
            value = ref.get(key)
            if value:
                event[key] = str(value)
    return event


OUTAGE_TEXT = re.compile(r"\((?:no answer|50[234] [A-Za-z]+)\) |etcdserver: ")
"""How an error of the API server being away reads (`kube.UnavailableError`'s text, also
inside another error's: `cannot record in-flight claims: (no answer) ...`)."""


def quiet_outages(_: Any, method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """A warning whose `error` says the API server was away is dropped (kept at debug level).

    The outage is logged once when it begins and once when it ends (`kopf_csi.reachability`),
    with the number of requests that failed meanwhile; a warning per failed request said the
    same 700 times in a 22 s outage on a real control plane. The hot paths choose their level
    themselves (`kube.is_unavailable`); this is the net under the rest (a start-up's retries,
    a resync, a health check).
    """
    if method in ("warning", "warn") and OUTAGE_TEXT.search(str(event.get("error", ""))):
        if not logging.getLogger().isEnabledFor(logging.DEBUG):
            raise structlog.DropEvent
        event["during_outage"] = True
    return event


def _shared() -> list[Any]:
    return [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        timestamp,
        expand_object,
    ]


def timestamp(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Processor: `timestamp`, UTC, ISO 8601 to the microsecond (`2026-12-07T13:26:02.377994Z`).

    structlog's `TimeStamper(fmt="iso", utc=True)` writes the same, but builds a datetime for
    every line (and drops the fraction when it is zero); the seconds' text is made once per
    second here."""
    now = time.time()
    seconds = int(now)
    event["timestamp"] = f"{_second_text(seconds)}.{int((now - seconds) * 1e6):06d}Z"
    return event


@functools.lru_cache(maxsize=4)
def _second_text(seconds: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))


def render_json(_: Any, __: str, event: Mapping[str, Any]) -> str:
    """Processor: the line as compact JSON, anything JSON has no form for as its repr."""
    return jsoncodec.line(event, default=repr)


RENDERED = "kopf_csi_rendered"
"""The attribute of a stdlib record whose message structlog's chain has rendered already."""

_AS_RENDERED = types.MappingProxyType({"extra": types.MappingProxyType({RENDERED: True})})


def _renderer(format: Format, colors: bool) -> Any:
    if format == "json":
        return render_json
    console = structlog.dev.ConsoleRenderer(colors=colors)

    def render_console(logger: Any, method: str, event: Mapping[str, Any]) -> str:
        return console(logger, method, dict(event))  # it pops keys: the line stays whole

    return render_console


_rendering: Any = render_json
"""The renderer of the last `configure()`: loggers cached by an earlier one follow it too."""


_ALWAYS = ("event", "level", "logger", "timestamp", *OBJECT_KEYS)
"""The keys a line keeps when its values cannot be rendered (all of them text)."""


def _render_to_stdlib(
    logger: Any, method: str, event: MutableMapping[str, Any]
) -> tuple[tuple[str], Mapping[str, Any]]:
    """Last processor: the line, rendered, goes to the stdlib logger as its message, marked.

    It runs in the code that logs, not in the handler (which the stdlib guards): a value that
    cannot be rendered (a `__repr__` that raises, a structure that contains itself) leaves the
    line with its text keys and `render_error` instead of failing that code."""
    try:
        line = _rendering(logger, method, event)
    except Exception as exc:  # any value's own failure: the line goes on
        kept = {key: str(event[key]) for key in _ALWAYS if key in event}
        line = _rendering(logger, method, {**kept, "render_error": type(exc).__name__})
    return (line,), _AS_RENDERED


class Formatter(structlog.stdlib.ProcessorFormatter):
    """The stdlib formatter of the one handler: our records come rendered by structlog's own
    chain, and pass as they are; foreign ones (kopf's, aiohttp's) are rendered here, with the
    same keys and renderer.

    Rendering ours in structlog's chain, not here, saves the record's copy and the second pass
    of processors that `ProcessorFormatter` makes for each: a line costed about 175 µs of CPU
    inside a busy operator (docs/benchmarks.md, "Sixth session")."""

    def format(self, record: logging.LogRecord) -> str:
        if getattr(record, RENDERED, False):
            return str(record.msg)
        return super().format(record)


def formatter(*, format: Format, colors: bool = False) -> Formatter:
    """The stdlib formatter rendering every record, ours and foreign, in one format."""
    return Formatter(
        foreign_pre_chain=[*_shared(), structlog.stdlib.ExtraAdder(), kopf_reference],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            _renderer(format, colors),
        ],
    )


class PerEventRecords(logging.Filter):
    """On kopf's per-object logger: `Handler '...' succeeded.` becomes a debug record.

    A filter on the logger runs before any of its handlers, kopf's event-posting handler
    included, so a demoted record never becomes a Kubernetes Event either.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.INFO and _is_handler_success(record):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return logging.getLogger().isEnabledFor(logging.DEBUG)
        return True


def _is_handler_success(record: logging.LogRecord) -> bool:
    message = record.msg if isinstance(record.msg, str) else ""
    return message.startswith("Handler ") and message.endswith(" succeeded.")


NOT_STARTED = "not started, lifecycle.connect failed: "
"""How a controller's start-up says that it did not start because the connection failed
(`runtime.NotStarted`): the connection's own failure is the one worth a line."""


class ReportedFailures(logging.Filter):
    """On kopf's start-up activity logger: a failure reported elsewhere becomes a debug record.

    Always the controllers that did not start because `lifecycle.connect` failed (eight lines
    repeating its reason); with `everything=True` (`kopf-csi run`, which names every failed
    start-up handler and its reason in one line of its own as it exits) every permanent failure.
    """

    def __init__(self, *, everything: bool = False) -> None:
        super().__init__()
        self.everything = everything

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage() if record.levelno >= logging.ERROR else ""
        if " failed permanently: " in message and (self.everything or NOT_STARTED in message):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return logging.getLogger().isEnabledFor(logging.DEBUG)
        return True


class OutageRetries(logging.Filter):
    """On kopf's API client loggers: a request it retries because the API server did not
    answer becomes a debug record.

    kopf retries its own requests (its watches' above all) and logs every failed attempt as an
    error: a control-plane restart wrote one per watched kind and attempt. The outage is told
    once, by our client (`kube.reachability`); a retry for another reason (403, 429) keeps its
    level.
    """

    OUTAGES = (
        "ClientConnectorError", "ServerDisconnectedError", "ClientOSError", "ClientPayloadError",
        "TimeoutError", "apiserver is shutting down", "status=503", "status=504",
    )  # fmt: skip

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.msg if isinstance(record.msg, str) else ""
        if "failed; will retry: " in message and any(text in message for text in self.OUTAGES):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return logging.getLogger().isEnabledFor(logging.DEBUG)
        return True


KOPF_CLIENT_LOGGERS = ("kopf._cogs.clients.watching", "kopf.objects", "kopf.activities")
"""kopf's loggers that log its request retries: its watches' own, and the logger of whatever
made the request (an object's handler, an activity)."""


def quiet_reported_failures() -> None:
    """`kopf-csi run` reports every failed start-up handler itself (see `ReportedFailures`)."""
    _add_filter("kopf.activities.startup", ReportedFailures(everything=True))


def _add_filter(name: str, new: logging.Filter) -> None:
    logger = logging.getLogger(name)
    logger.filters[:] = [f for f in logger.filters if type(f) is not type(new)] + [new]


def _install_filters() -> None:
    kopf_objects = logging.getLogger("kopf.objects")
    if not any(isinstance(f, PerEventRecords) for f in kopf_objects.filters):
        kopf_objects.addFilter(PerEventRecords())
    startup = logging.getLogger("kopf.activities.startup")
    if not any(isinstance(f, ReportedFailures) for f in startup.filters):
        startup.addFilter(ReportedFailures())
    quiet_outage_retries()


def quiet_outage_retries() -> None:
    """kopf's retries of requests the API server did not answer, at debug (`OutageRetries`):
    installed by every operator run (`runtime.configure_kopf`), the testing kit's included."""
    for name in KOPF_CLIENT_LOGGERS:
        _add_filter(name, OutageRetries())


def _quiet_hpack() -> None:
    # hpack logs every HTTP/2 header at DEBUG, and a driver's error text travels in the
    # `grpc-message` header: it may echo a secret. Never below INFO, whatever the level.
    logging.getLogger("hpack").setLevel(max(logging.INFO, logging.getLogger().level))


def follow_kopf() -> bool:
    """Under `kopf run`: our records through kopf's logging (its handler, format and level).

    Only when kopf's command line has configured logging (its handler is on the root logger)
    and nothing has configured structlog: an entry point of ours, a test, a user's script
    configure their own. Returns whether it did.
    """
    kopf_handler = any(
        type(h).__name__ == "_KopfStreamHandler" for h in logging.getLogger().handlers
    )
    if not kopf_handler or structlog.is_configured():
        return False
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,  # kopf's level: debug only with --verbose
            quiet_outages,
            structlog.contextvars.merge_contextvars,
            expand_object,
            structlog.processors.format_exc_info,
            _as_message,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    _quiet_hpack()
    _install_filters()
    return True


def _as_message(
    _: Any, __: str, event: MutableMapping[str, Any]
) -> tuple[tuple[str], dict[str, Any]]:
    """The record's message for a foreign formatter: `event key=value ...` in one line."""
    text = str(event.pop("event", ""))
    exception = event.pop("exception", None)
    fields = " ".join(f"{key}={_value(value)}" for key, value in event.items())
    message = f"{text} {fields}" if fields else text
    if exception:
        message = f"{message}\n{exception}"
    return (message,), {}


def _value(value: Any) -> str:
    text = value if isinstance(value, str) else repr(value)
    return repr(text) if not text or any(c.isspace() or c in "'\"=" for c in text) else text


def configure(
    *,
    level: str | int = "INFO",
    format: Format | None = None,
    json: bool | None = None,
    stream: TextIO | None = None,
    cache_loggers: bool = True,  # False in tests, which configure and restore repeatedly
) -> None:
    """Route structlog and stdlib logging through one handler on `stream` (stderr).

    `format` (`json` or `console`) wins; else `json=True/False`; else JSON unless the stream
    is a terminal. Colours only on a terminal.
    """
    stream = sys.stderr if stream is None else stream
    if format is None:
        tty = stream.isatty()
        format = ("json" if json else "console") if json is not None else (
            "console" if tty else "json"
        )  # fmt: skip
    if format not in FORMATS:
        raise ValueError(f"log format {format!r} is not one of {', '.join(FORMATS)}")
    global _rendering
    colors = format == "console" and stream.isatty()
    _rendering = _renderer(format, colors)
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,  # drop disabled levels before any work
            quiet_outages,
            *_shared(),
            structlog.processors.format_exc_info,
            _render_to_stdlib,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=cache_loggers,
    )
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter(format=format, colors=colors))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level if isinstance(level, int) else level.upper())
    _skip_record_lookups()
    _quiet_hpack()
    _install_filters()


def _skip_record_lookups() -> None:
    """Records made from now on carry no caller (file, line, function), thread or process.

    Neither format here renders them, and the stdlib looks them up for every record, the
    caller by walking the stack (structlog's `findCaller` past its own frames): a fifth to a
    quarter of what a line costs (docs/benchmarks.md, "Operator CPU (fourth session)"). These
    are the switches of the logging HOWTO's "Optimization" section.
    """
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
