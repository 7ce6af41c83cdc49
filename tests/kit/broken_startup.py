"""A user's module whose start-up handler fails (the issue's case): a typo in the memo."""

from typing import Any

import kopf


@kopf.on.startup()
async def register(memo: kopf.Memo, **_: Any) -> None:
    memo.nonexistent_thing.append(1)
