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
import logging
import sys
from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any, Literal, TextIO

import structlog

__all__ = [
    "FORMATS",
    "PerEventRecords",
    "bound_object",
    "configure",
    "expand_object",
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


def _shared() -> list[Any]:
    return [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        expand_object,
    ]


def formatter(*, format: Format, colors: bool = False) -> structlog.stdlib.ProcessorFormatter:
    """The stdlib formatter rendering every record, ours and foreign, in one format."""
    renderer: Any
    if format == "json":
        renderer = structlog.processors.JSONRenderer(default=repr)
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=colors)
    return structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[*_shared(), structlog.stdlib.ExtraAdder(), kopf_reference],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            renderer,
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


def _install_filters() -> None:
    kopf_objects = logging.getLogger("kopf.objects")
    if not any(isinstance(f, PerEventRecords) for f in kopf_objects.filters):
        kopf_objects.addFilter(PerEventRecords())


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
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,  # drop disabled levels before any work
            *_shared(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=cache_loggers,
    )
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter(format=format, colors=format == "console" and stream.isatty()))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level if isinstance(level, int) else level.upper())
    # hpack logs every HTTP/2 header at DEBUG, and a driver's error text travels in the
    # `grpc-message` header: it may echo a secret. Never below INFO, whatever the level.
    logging.getLogger("hpack").setLevel(max(logging.INFO, root.level))
    _install_filters()
