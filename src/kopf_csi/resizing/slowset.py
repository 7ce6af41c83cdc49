"""Claims whose last attempt was infeasible: retried only after an interval (csi-lib-utils'
`slowset`, used by external-resizer's `markForSlowRetry` and the modify controller).

In memory, as upstream: after a restart, a claim whose status says "infeasible" is tried once
more, then slowed down again.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["SlowSet"]


class SlowSet:
    def __init__(self, interval: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self._clock = clock
        self._added: dict[str, float] = {}

    def add(self, key: str) -> None:
        """Start the interval now, unless the key is already waiting (upstream keeps the first)."""
        if not self.contains(key):
            self._added[key] = self._clock()

    def remove(self, key: str) -> None:
        self._added.pop(key, None)

    def contains(self, key: str) -> bool:
        return self.remaining(key) > 0

    def remaining(self, key: str) -> float:
        """Seconds until the key may be tried again; 0 when it may (or was never added)."""
        added = self._added.get(key)
        if added is None:
            return 0.0
        left = self.interval - (self._clock() - added)
        if left <= 0:
            del self._added[key]
            return 0.0
        return left

    def __len__(self) -> int:
        return len(self._added)
