"""The pure algorithms: JSON patch, merge patch, strategic merge patch, selectors."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kopf_csi.testing.apimachinery import (
    StatusError,
    json_patch,
    merge_patch,
    parse_field_selector,
    parse_label_selector,
    strategic_merge_patch,
)

DOC = {
    "metadata": {"resourceVersion": "5", "finalizers": ["a", "b"], "labels": {"x": "1"}},
    "spec": {},
}


@pytest.mark.parametrize(
    ("ops", "expected"),
    [
        pytest.param(
            [{"op": "add", "path": "/spec/k", "value": 1}], {**DOC, "spec": {"k": 1}}, id="add"
        ),
        pytest.param(
            [{"op": "add", "path": "/metadata/finalizers/-", "value": "c"}],
            {**DOC, "metadata": {**DOC["metadata"], "finalizers": ["a", "b", "c"]}},
            id="append",
        ),
        pytest.param(
            [{"op": "remove", "path": "/metadata/finalizers/0"}],
            {**DOC, "metadata": {**DOC["metadata"], "finalizers": ["b"]}},
            id="remove-item",
        ),
        pytest.param(
            [{"op": "replace", "path": "/metadata/labels/x", "value": "2"}],
            {**DOC, "metadata": {**DOC["metadata"], "labels": {"x": "2"}}},
            id="replace",
        ),
        pytest.param(
            [{"op": "move", "from": "/metadata/labels", "path": "/spec/labels"}],
            {
                "metadata": {"resourceVersion": "5", "finalizers": ["a", "b"]},
                "spec": {"labels": {"x": "1"}},
            },
            id="move",
        ),
        pytest.param(
            [
                {"op": "test", "path": "/metadata/resourceVersion", "value": "5"},
                {"op": "remove", "path": "/spec"},
            ],
            {"metadata": DOC["metadata"]},
            id="test-passes",
        ),
    ],
)
def test_json_patch(ops: list[dict[str, Any]], expected: dict[str, Any]) -> None:
    original = copy.deepcopy(DOC)
    assert json_patch(DOC, ops) == expected
    assert original == DOC  # never mutates its input


@pytest.mark.parametrize(
    "ops",
    [
        pytest.param(
            [{"op": "test", "path": "/metadata/resourceVersion", "value": "4"}], id="test-fails"
        ),
        pytest.param([{"op": "remove", "path": "/spec/missing"}], id="remove-missing"),
        pytest.param(
            [{"op": "replace", "path": "/metadata/finalizers/5", "value": "x"}],
            id="index-out-of-range",
        ),
    ],
)
def test_json_patch_failures_are_422(ops: list[dict[str, Any]]) -> None:
    with pytest.raises(StatusError) as error:
        json_patch(DOC, ops)
    assert error.value.code == 422


def test_merge_patch_merges_maps_deletes_nulls_and_replaces_lists() -> None:
    patch = {"metadata": {"labels": {"x": None, "y": "2"}, "finalizers": ["c"]}}
    assert merge_patch(DOC, patch) == {
        "metadata": {"resourceVersion": "5", "finalizers": ["c"], "labels": {"y": "2"}},
        "spec": {},
    }


def test_strategic_merge_patch_unions_and_deletes_finalizers() -> None:
    patch = {
        "metadata": {
            "finalizers": ["b", "c"],
            "$deleteFromPrimitiveList/finalizers": ["a"],
            "$setElementOrder/finalizers": ["b", "c"],
        }
    }
    assert strategic_merge_patch(DOC, patch)["metadata"]["finalizers"] == ["b", "c"]
    assert strategic_merge_patch(DOC, {"spec": {"accessModes": ["ReadOnlyMany"]}})["spec"] == {
        "accessModes": ["ReadOnlyMany"]  # other lists are replaced
    }


@pytest.mark.parametrize(
    ("text", "labels", "matches"),
    [
        ("a=1,b!=2", {"a": "1"}, True),
        ("a in (1, 2),!c", {"a": "2", "c": "x"}, False),
        ("a notin (1),b", {"b": ""}, True),
        ("", {}, True),
    ],
)
def test_label_selectors(text: str, labels: dict[str, str], matches: bool) -> None:
    selector = parse_label_selector(text)
    assert (selector is None or selector({"metadata": {"labels": labels}})) is matches


@pytest.mark.parametrize("text", ["a in 1", "!a=1", "a>1"])
def test_bad_label_selectors_are_400(text: str) -> None:
    with pytest.raises(StatusError) as error:
        parse_label_selector(text)
    assert error.value.code == 400


def test_field_selectors_compare_strings_and_treat_absent_as_empty() -> None:
    selector = parse_field_selector("spec.nodeName=,metadata.name!=b,spec.ready=true")
    assert selector is not None
    assert selector({"metadata": {"name": "a"}, "spec": {"ready": True}})
    assert not selector({"metadata": {"name": "a"}, "spec": {"ready": True, "nodeName": "n"}})
