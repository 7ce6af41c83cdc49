"""Amounts that CreateVolume hooks hold for claims, per key: what a quota needs under concurrency.

The provisioner works on many claims at once (`--worker-threads`), so two hooks of one
namespace can run at the same time: each reading the namespace's usage, each finding room,
together passing the budget. A hold closes that gap. `hold` checks and holds in one step
(under a lock: a plain `def` hook runs in a thread): the amounts held under the key by other
claims, plus those the hook counted itself (`counted`, by claim uid: the claims bound before,
say), plus this claim's amount, must stay within the limit. Each claim is counted once,
whether it is held, counted, or both. A claim may hold under several keys (a namespace's
budget and a team's).

A claim's hold lasts while its volume may exist: it ends when its attempt fails with nothing
left on the driver (a later hook refused it, CreateVolume failed), or when the claim is
deleted. A provisioned claim keeps its hold: released at "provisioned", it would count for
nothing until the hook's next read saw it bound, and a burst of claims would pass the budget
in that gap. A retried claim's new hold replaces its old one. The holds live in memory: after
a restart, `counted` is what tells the hook about the claims provisioned before.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, MutableMapping
from typing import Any

__all__ = ["Reservations", "reservations"]

MEMO_KEY = "reservations"


class Reservations:
    """The operator's holds: key → claim uid → amount (bytes, or anything one adds up)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[str, dict[str, int]] = {}

    def hold(
        self,
        key: str,
        uid: str,
        amount: int,
        *,
        limit: int,
        counted: Mapping[str, int] | None = None,
    ) -> int | None:
        """Hold `amount` under `key` for the claim `uid` if it fits within `limit`: None when
        held, else the amount in use (held and counted, without this claim) that refuses it."""
        with self._lock:
            in_use = {**(counted or {}), **self._held.get(key, {})}
            in_use.pop(uid, None)
            used = sum(in_use.values())
            if used + amount > limit:
                return used
            self._held.setdefault(key, {})[uid] = amount
            return None

    def release(self, uid: str) -> None:
        """The claim's attempt failed, or the claim is gone: its hold ends, wherever it is."""
        with self._lock:
            for key in [key for key, held in self._held.items() if held.pop(uid, None) is not None]:
                if not self._held[key]:
                    del self._held[key]

    def held(self, key: str) -> dict[str, int]:
        """The holds under `key`: claim uid → amount (a copy)."""
        with self._lock:
            return dict(self._held.get(key, {}))


def reservations(memo: MutableMapping[str, Any]) -> Reservations:
    """The one ledger in this operator's memo (created by whoever asks first)."""
    ledger: Reservations = memo.setdefault(MEMO_KEY, Reservations())
    return ledger
