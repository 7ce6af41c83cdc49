"""A user's module whose start-up handler asks kopf for a retry once, then succeeds."""

from typing import Any

import kopf

attempts: list[int] = []


@kopf.on.startup(id="retried")
async def wait_for_something(retry: int, **_: Any) -> None:
    attempts.append(retry)
    if retry == 0:
        raise kopf.TemporaryError("not there yet", delay=0.1)
