"""A user's module on the operator's streams (`kopf_csi.on`), as the README shows it.

Each handler writes what it saw into `memo.seen` for the test to read."""

from __future__ import annotations

from typing import Any

import kopf_csi.on


def _seen(memo: Any, *entry: Any) -> None:
    memo.setdefault("seen", []).append(entry)


@kopf_csi.on.claim_event()
async def claims(*, type: str, claim: Any, memo: Any, **_: Any) -> None:
    _seen(memo, "claim", type, claim["metadata"]["name"])


@kopf_csi.on.volume_provisioned()
async def provisioned(*, volume: Any, claim: Any, logger: Any, memo: Any, **_: Any) -> None:
    logger.info("user_saw_provisioned")
    _seen(memo, "provisioned", volume["metadata"]["name"], claim and claim["metadata"]["name"])


@kopf_csi.on.volume_released()
def released(*, volume: Any, memo: Any, **_: Any) -> None:  # a sync one: in a thread
    _seen(memo, "released", volume["metadata"]["name"])


@kopf_csi.on.volume_deleted()
async def deleted(*, volume: Any, memo: Any, **_: Any) -> None:
    _seen(memo, "deleted", volume["metadata"]["name"])


@kopf_csi.on.volume_event(provisioner="example.com/someone-else")
async def others(*, volume: Any, memo: Any, **_: Any) -> None:
    _seen(memo, "someone-else's", volume["metadata"]["name"])


@kopf_csi.on.volume_provisioned(id="user.failing")
async def failing(*, volume: Any, **_: Any) -> None:
    raise RuntimeError(f"a bug in the user's handler for {volume['metadata']['name']}")
