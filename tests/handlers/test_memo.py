"""The operator's memo and kopf's per-object copies of it (`runtime.OperatorMemo`)."""

from __future__ import annotations

import copy

import kopf
import pytest

from kopf_csi.runtime import ObjectMemo, OperatorMemo


def test_a_copy_reads_through_to_the_operator_memo() -> None:
    memo = OperatorMemo(settings="s", csi="client")
    view = copy.copy(memo)  # what kopf does for every object it sees
    assert isinstance(view, ObjectMemo)
    assert isinstance(view, kopf.Memo)
    assert view.csi == "client"
    assert view["settings"] == "s"
    assert view.get("csi") == "client"
    assert view.get("nothing", 7) == 7
    assert "csi" in view
    assert "nothing" not in view
    assert getattr(view, "nothing", None) is None
    assert dict.__len__(view) == 0  # nothing of its own: that is the saving


def test_later_operator_entries_are_seen_as_with_a_shared_value() -> None:
    memo = OperatorMemo()
    view = copy.copy(memo)
    memo.driver = "hostpath"  # set by a start-up handler after the copy was made
    assert view.driver == "hostpath"


def test_writes_stay_with_the_object_as_with_kopf_s_shallow_copies() -> None:
    memo = OperatorMemo(counter=0)
    one, two = copy.copy(memo), copy.copy(memo)
    one.counter = 5
    one.mine = "x"
    assert one.counter == 5
    assert two.counter == 0
    assert memo.counter == 0
    assert "mine" not in memo
    assert "mine" not in two
    assert two.setdefault("hooks", []) == []
    assert "hooks" not in memo
    assert sorted(one) == ["counter", "mine"]
    assert dict(one.items()) == {"counter": 5, "mine": "x"}
    assert len(one) == 2
    del one.mine
    assert "mine" not in one


def test_a_copy_of_a_copy_keeps_its_entries_and_its_parent() -> None:
    memo = OperatorMemo(a=1)
    view = copy.copy(memo)
    view.b = 2
    again = copy.copy(view)
    assert again.a == 1
    assert again.b == 2
    again.b = 3
    assert view.b == 2


def test_a_missing_attribute_is_an_attribute_error() -> None:
    view = copy.copy(OperatorMemo())
    with pytest.raises(AttributeError):
        view.nothing  # noqa: B018
