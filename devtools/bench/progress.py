"""The live progress display: one updating line on a terminal, else a line every few seconds."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import sys
from collections.abc import AsyncIterator, Callable
from typing import TextIO

__all__ = ["Progress"]


class Progress:
    """`async with progress.showing(status):` shows `status()` until the block ends."""

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        tty: bool | None = None,
        interval: float | None = None,
        enabled: bool = True,
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.interval = interval if interval is not None else (0.25 if self.tty else 5.0)
        self.enabled = enabled

    def show(self, text: str) -> None:
        if not self.enabled:
            return
        if self.tty:
            width = shutil.get_terminal_size((120, 24)).columns - 1
            self.stream.write("\r\x1b[K" + text[:width])
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def note(self, text: str) -> None:
        """A line that stays (a step finished)."""
        if not self.enabled:
            return
        if self.tty:
            self.stream.write("\r\x1b[K")
        self.stream.write(text + "\n")
        self.stream.flush()

    @contextlib.asynccontextmanager
    async def showing(self, status: Callable[[], str]) -> AsyncIterator[None]:
        async def refresh() -> None:
            while True:
                self.show(status())
                await asyncio.sleep(self.interval)

        task = asyncio.create_task(refresh(), name="bench-progress")
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            self.note(status())
