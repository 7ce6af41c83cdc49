"""The event loop the operator runs on: uvloop's where it is installed, else asyncio's own.

uvloop (libuv under asyncio's API) runs the same code with less CPU per request: its
transports, TLS and callbacks are C. Under steady churn the operator used 18 % less CPU per
volume on it (docs/benchmarks.md, "The event loop"). kopf's own CLI (`kopf run`) makes the same
choice. The only module that imports uvloop.

`--event-loop asyncio` (`KOPF_CSI_EVENT_LOOP`) keeps asyncio's pure-Python loop, for a platform
where uvloop is missing or a suspected difference in behaviour.
"""

from __future__ import annotations

import asyncio
import importlib.util

__all__ = ["CHOICES", "EventLoopError", "available", "name", "new_event_loop"]

CHOICES = ("auto", "uvloop", "asyncio")
"""`auto`: uvloop when it is installed (it is a dependency on Linux and macOS), else asyncio."""


class EventLoopError(ValueError):
    """An event loop asked for by name that this interpreter cannot give."""


def available() -> bool:
    """Whether uvloop can be imported here (not on Windows, nor a platform without a wheel)."""
    return importlib.util.find_spec("uvloop") is not None


def new_event_loop(choice: str = "auto") -> asyncio.AbstractEventLoop:
    """A new loop of the chosen kind; the caller runs and closes it."""
    if choice not in CHOICES:
        raise EventLoopError(f"event loop {choice!r} is not one of {', '.join(CHOICES)}")
    if choice == "asyncio" or (choice == "auto" and not available()):
        return asyncio.new_event_loop()
    try:
        import uvloop
    except ImportError as exc:
        raise EventLoopError(f"event loop 'uvloop' is not installed here: {exc}") from None
    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    return loop


def name(loop: asyncio.AbstractEventLoop) -> str:
    """`uvloop` or `asyncio`: what a running operator says it runs on (its start-up log)."""
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"
