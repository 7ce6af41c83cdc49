"""Logging: structlog for our records, and the same renderer for stdlib records (kopf's own).

One `configure()` call per process, from an entry point; libraries never configure logging.
JSON lines when not on a terminal (in a cluster), readable console lines on a terminal.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog

__all__ = ["configure"]


def configure(*, level: str | int = "INFO", json: bool | None = None) -> None:
    """Route structlog and stdlib logging through one handler on stderr."""
    if json is None:
        json = not sys.stderr.isatty()
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if json
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,  # drop disabled levels before any work
            *shared,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[*shared, structlog.stdlib.ExtraAdder()],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            renderer,
        ],
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level if isinstance(level, int) else level.upper())
