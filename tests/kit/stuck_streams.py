"""A user's stream handler that never returns, beside one that records deletions."""

from __future__ import annotations

import asyncio
from typing import Any

import kopf_csi.on


@kopf_csi.on.volume_event()
async def stuck(**_: Any) -> None:
    await asyncio.Event().wait()  # a bug: it waits for something that never comes


@kopf_csi.on.volume_deleted()
async def deleted(*, volume: Any, memo: Any, **_: Any) -> None:
    memo.setdefault("deleted", []).append(volume["metadata"]["name"])
