"""The same wish written with plain kopf: a second watch of every PV, and kopf's annotations."""

from __future__ import annotations

from typing import Any

import kopf


@kopf.on.create("persistentvolumes")
async def created(logger: Any, body: Any, **_: Any) -> None:
    logger.info("created %s", body["metadata"]["name"])
