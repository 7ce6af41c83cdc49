"""The client-side limit on API requests: `--kube-api-qps` and `--kube-api-burst`.

client-go gives every client a token bucket (`flowcontrol.NewTokenBucketRateLimiter`, over
`golang.org/x/time/rate`): the bucket holds up to `burst` tokens and gains `qps` per second;
each request takes one, and a request that finds none waits until its token is due. Requests
wait in the order they came: each reservation is counted against the tokens to come, so the
tenth waiter in line waits ten tokens' time, not one.

A request that may give way (an event: the work it reports matters more) takes a token only
when one is there (`reserve_spare`), and otherwise tries again when one will be: requests that
cannot give way reserve meanwhile and go first. The limit is the same; only the order changes.

A request that waited over `LONG_WAIT` is worth a log line (client-go logs "Waited for ... due
to client-side throttling" then, at most once every 10 s at its default verbosity):
`report_due` says when, at most once per `REPORT_INTERVAL`.

Pure: the caller gives the time and does the waiting (`kube.KubeClient`); nothing here sleeps.
"""

from __future__ import annotations

import dataclasses

__all__ = ["LONG_WAIT", "REPORT_INTERVAL", "TokenBucket"]

LONG_WAIT = 1.0
"""Seconds of waiting for a token that a log line reports (client-go: over 1 s)."""
REPORT_INTERVAL = 10.0
"""Seconds between two such lines of one bucket (client-go: 10 s at its default verbosity)."""


@dataclasses.dataclass
class TokenBucket:
    """`burst` requests at once, then `qps` per second on average.

    `reserve(now)` takes a token and says how long the request must wait for it (0.0: at
    once). The counters say what the limit cost: requests seen, requests that waited, and
    the seconds they waited in all and at most.
    """

    qps: float
    burst: int
    tokens: float = dataclasses.field(init=False)
    stamp: float | None = dataclasses.field(default=None, init=False)
    requests: int = dataclasses.field(default=0, init=False)
    delayed: int = dataclasses.field(default=0, init=False)
    waited: float = dataclasses.field(default=0.0, init=False)
    longest: float = dataclasses.field(default=0.0, init=False)
    reported: float | None = dataclasses.field(default=None, init=False)
    last_delayed_at: float | None = dataclasses.field(default=None, init=False)
    """When the latest request that had to wait began waiting (for explain)."""
    last_delay: float = dataclasses.field(default=0.0, init=False)
    """How long that request waited (or waits)."""

    def __post_init__(self) -> None:
        if not self.qps > 0:
            raise ValueError(f"the QPS must be positive, got {self.qps}")
        if self.burst < 1:
            raise ValueError(f"the burst must be at least 1, got {self.burst}")
        self.tokens = float(self.burst)  # a new client may send its whole burst at once

    def reserve(self, now: float) -> float:
        """Take a token at `now` (monotonic seconds); the seconds to wait before sending."""
        self._refill(now)
        self.tokens -= 1.0
        self.requests += 1
        if self.tokens >= 0.0:
            return 0.0
        delay = -self.tokens / self.qps
        self._count_wait(delay, since=now)
        return delay

    def reserve_spare(self, now: float, *, waited: float = 0.0) -> float:
        """Take a token at `now` only if one is there: 0.0 when taken. Otherwise nothing is
        taken, and the result is the seconds until one will be (if nobody reserves it first):
        the caller waits that long and asks again, `waited` being its wait so far."""
        self._refill(now)
        if self.tokens < 1.0:
            return (1.0 - self.tokens) / self.qps
        self.tokens -= 1.0
        self.requests += 1
        if waited > 0:
            self._count_wait(waited, since=now - waited)
        return 0.0

    def _refill(self, now: float) -> None:
        if self.stamp is not None and now > self.stamp:
            self.tokens = min(float(self.burst), self.tokens + (now - self.stamp) * self.qps)
        if self.stamp is None or now > self.stamp:
            self.stamp = now

    def _count_wait(self, seconds: float, *, since: float) -> None:
        self.delayed += 1
        self.waited += seconds
        self.longest = max(self.longest, seconds)
        self.last_delayed_at, self.last_delay = since, seconds

    def report_due(self, now: float, delay: float) -> bool:
        """Whether a request that must wait `delay` seconds from `now` should be logged: a
        long wait, and none logged in the last `REPORT_INTERVAL` seconds."""
        if delay <= LONG_WAIT:
            return False
        if self.reported is not None and now - self.reported < REPORT_INTERVAL:
            return False
        self.reported = now
        return True

    def summary(self) -> dict[str, float]:
        """The counters, for the benchmark's report and the debug endpoint."""
        return {
            "qps": self.qps,
            "burst": self.burst,
            "requests": self.requests,
            "delayed": self.delayed,
            "waited_seconds": round(self.waited, 3),
            "max_wait_ms": round(self.longest * 1000, 1),
        }
