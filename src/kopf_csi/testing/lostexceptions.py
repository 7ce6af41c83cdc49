"""Exceptions nobody retrieved: a background task that died, seen in every test.

asyncio logs `Task exception was never retrieved` when a task that raised is garbage
collected without anyone having awaited it: a background task (a journal lane's flush, an
informer, a renewal loop) died, and whoever waited on what it would have done may wait for
ever. On a real control plane, seven of these stopped 48 claims for good while the process ran
on (issue 30). Here every such log line, from any thread's loop, is collected, and the kit's
pytest plugin fails the test during which it came (and the session, for one that came after
the last test), naming the task.
"""

from __future__ import annotations

import logging
import threading

__all__ = ["LostExceptions"]

MARKERS = ("exception was never retrieved",)
"""What asyncio's messages for a lost exception say (a Task's and a Future's alike)."""


class LostExceptions(logging.Handler):
    """A handler on the `asyncio` logger that keeps the lost-exception messages."""

    def __init__(self) -> None:
        super().__init__(level=logging.ERROR)
        self._lock_seen = threading.Lock()
        self._seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if not any(marker in message for marker in MARKERS):
            return
        context = getattr(record, "exc_info", None)
        detail = f"{message} ({context[1]!r})" if context and context[1] is not None else message
        with self._lock_seen:
            self._seen.append(detail)

    def take(self) -> list[str]:
        """The messages collected since the last call, and forget them."""
        with self._lock_seen:
            seen, self._seen = self._seen, []
        return seen

    def install(self) -> None:
        logging.getLogger("asyncio").addHandler(self)

    def uninstall(self) -> None:
        logging.getLogger("asyncio").removeHandler(self)
