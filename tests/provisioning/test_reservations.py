"""Holds for quotas under concurrency (`reservations`), and the hook context that takes them.

We test these aspects: a hold is checked and taken in one step; each claim counts once, held,
counted or both; a retried claim replaces its own hold; releases; holds under several keys;
threads (plain `def` hooks) racing on one key; and that a hook gets `context=` only if it
takes it, old three-argument hooks being called as before.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from kopf_csi.csi import messages as csi
from kopf_csi.provisioning.hookcalls import run_hooks
from kopf_csi.provisioning.hookcontext import HookContext, OverBudget
from kopf_csi.provisioning.reservations import Reservations, reservations

MI = 2**20


def test_holds_fill_up_to_the_limit_and_refuse_beyond() -> None:
    ledger = Reservations()
    assert ledger.hold("ns", "a", 6 * MI, limit=10 * MI) is None
    assert ledger.hold("ns", "b", 4 * MI, limit=10 * MI) is None
    assert ledger.hold("ns", "c", 1, limit=10 * MI) == 10 * MI  # what refuses it
    assert ledger.held("ns") == {"a": 6 * MI, "b": 4 * MI}


def test_each_claim_counts_once_held_counted_or_both() -> None:
    ledger = Reservations()
    ledger.hold("ns", "a", 4 * MI, limit=10 * MI)
    counted = {"a": 4 * MI, "old": 5 * MI}  # a is bound now, and held: once
    assert ledger.hold("ns", "b", 1 * MI, limit=10 * MI, counted=counted) is None
    assert ledger.hold("ns", "c", 1 * MI, limit=10 * MI, counted=counted) == 10 * MI


def test_a_retried_claim_replaces_its_own_hold() -> None:
    ledger = Reservations()
    ledger.hold("ns", "a", 8 * MI, limit=10 * MI)
    assert ledger.hold("ns", "a", 9 * MI, limit=10 * MI) is None  # not 17
    assert ledger.held("ns") == {"a": 9 * MI}


def test_a_release_ends_the_claims_holds_under_every_key() -> None:
    ledger = Reservations()
    ledger.hold("namespace/a", "x", 1, limit=10)
    ledger.hold("team/t", "x", 1, limit=10)
    ledger.hold("team/t", "y", 2, limit=10)
    ledger.release("x")
    assert ledger.held("namespace/a") == {}
    assert ledger.held("team/t") == {"y": 2}
    ledger.release("nobody")  # nothing held: nothing to do


def test_threads_racing_on_one_key_never_pass_the_limit() -> None:
    ledger = Reservations()
    start = threading.Barrier(20)
    won: list[str] = []

    def attempt(uid: str) -> None:
        start.wait()
        if ledger.hold("ns", uid, 1, limit=5) is None:
            won.append(uid)

    threads = [threading.Thread(target=attempt, args=(str(i),)) for i in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(won) == 5


def test_the_memo_holds_one_ledger_whoever_asks_first() -> None:
    memo: dict[str, Any] = {}
    assert reservations(memo) is reservations(memo)


def _context(uid: str, ledger: Reservations) -> HookContext:
    return HookContext(api=None, claim={"metadata": {"uid": uid}}, reservations=ledger)  # type: ignore[arg-type]


def test_the_context_reserves_for_its_claim_or_raises_over_budget() -> None:
    ledger = Reservations()
    _context("a", ledger).reserve("ns", 8, limit=10)
    with pytest.raises(OverBudget) as info:
        _context("b", ledger).reserve("ns", 3, limit=10)
    assert (info.value.used, info.value.limit, info.value.amount) == (8, 10, 3)
    assert str(info.value) == "ns: 3 more would pass the limit of 10 (8 in use or reserved)"
    assert _context("b", ledger).held("ns") == 8


async def test_a_hook_gets_the_context_only_if_it_takes_it() -> None:
    seen: dict[str, Any] = {}

    async def old(claim: Any, sc: Any, request: csi.CreateVolumeRequest) -> None:
        seen["old"] = True

    async def new(claim: Any, sc: Any, request: Any, *, context: HookContext) -> None:
        seen["new"] = context

    def plain(claim: Any, sc: Any, request: Any, **kwargs: Any) -> None:
        seen["plain"] = kwargs["context"]

    context = _context("a", Reservations())
    request = csi.CreateVolumeRequest(name="pvc-1")
    await run_hooks([old, new, plain], {}, {}, request, context=context)
    assert seen == {"old": True, "new": context, "plain": context}
