"""Per-claim exponential backoff: 1 s, 2 s, 4 s ... up to 5 min, forever (client-go's limiter).

external-provisioner gives every claim and every volume its own
`ItemExponentialFailureRateLimiter(retry-interval-start, retry-interval-max)`: the n-th
consecutive failure waits `start * 2**(n-1)`, capped at `max`; a success resets the count.
"""

from __future__ import annotations

__all__ = ["next_delay"]


def next_delay(failures: int, *, start: float = 1.0, maximum: float = 300.0) -> float:
    """The wait after the `failures`-th consecutive failure (1 = the first failure)."""
    if failures < 1:
        return 0.0
    exponent = failures - 1
    if exponent >= 64 or start * 2.0**exponent > maximum:  # also guards float overflow
        return maximum
    return start * 2.0**exponent
