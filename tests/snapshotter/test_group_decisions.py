"""The group controller's pure decisions (`kopf_csi.snapshotting.groups`).

We test these aspects:
- which group contents are ours (a source, our driver, no class of another driver);
- `shouldDeleteGroupSnapshotContent`: unbound pre-provisioned, being-created wins over
  being-deleted;
- the dispatch: delete (policy Delete with a handle), release, create (no status, or no handle
  after a failure), ready, check (not ready, pre-provisioned);
- the member ids come from the status list, else the pre-provisioned handles;
- the status arithmetic, the cleared status, the guarded finalizer patch, the enqueue filter.
"""

from __future__ import annotations

from typing import Any

import pytest

from kopf_csi import names
from kopf_csi.snapshotting import decisions, groups
from kopf_csi.snapshotting.group_operations import GroupSnapshotter
from kopf_csi.snapshotting.groups import Action

DRIVER = "hostpath.csi.kopf.dev"


def content(
    *,
    status: dict[str, Any] | None = None,
    deleting: bool = False,
    annotations: dict[str, str] | None = None,
    policy: str = "Delete",
    preprovisioned: bool = False,
    uid: str = "g-1",
) -> dict[str, Any]:
    handles = {"volumeGroupSnapshotHandle": "gh", "volumeSnapshotHandles": ["s1", "s2"]}
    source: dict[str, Any] = (
        {"groupSnapshotHandles": handles} if preprovisioned else {"volumeHandles": ["v1", "v2"]}
    )
    body: dict[str, Any] = {
        "metadata": {
            "name": "groupsnapcontent-1",
            "annotations": dict(annotations or {}),
            "finalizers": ["other", names.FINALIZER_GROUP_SNAPSHOT_CONTENT_BOUND],
            "resourceVersion": "7",
        },
        "spec": {
            "driver": DRIVER,
            "deletionPolicy": policy,
            "source": source,
            "volumeGroupSnapshotRef": {"name": "g", "namespace": "ns", "uid": uid},
            "volumeGroupSnapshotClassName": "gc",
        },
    }
    if deleting:
        body["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    if status is not None:
        body["status"] = status
    return body


HANDLED = {"volumeGroupSnapshotHandle": "gh", "readyToUse": False}
BEING_DELETED = {names.ANN_GROUP_SNAPSHOT_BEING_DELETED: "yes"}


def test_ours_by_driver_source_and_class() -> None:
    def classes(name: str) -> dict[str, Any] | None:
        return {"gc": {"driver": DRIVER}, "theirs": {"driver": "other"}}.get(name)

    assert groups.is_driver_match(content(), driver=DRIVER, class_of=classes)
    assert groups.is_driver_match(content(preprovisioned=True), driver=DRIVER, class_of=classes)
    assert not groups.is_driver_match(content(), driver="other", class_of=classes)
    theirs = content()
    theirs["spec"]["volumeGroupSnapshotClassName"] = "theirs"
    assert not groups.is_driver_match(theirs, driver=DRIVER, class_of=classes)
    sourceless = content()
    sourceless["spec"]["source"] = {}
    assert not groups.is_driver_match(sourceless, driver=DRIVER, class_of=classes)


@pytest.mark.parametrize(
    ("body", "action"),
    [
        (content(), Action.CREATE),
        (content(status={"readyToUse": False, "error": {"message": "x"}}), Action.CREATE),
        (content(status=HANDLED), Action.CHECK),
        (content(status={**HANDLED, "readyToUse": True}), Action.READY),
        (content(preprovisioned=True), Action.CHECK),
        (content(deleting=True, annotations=BEING_DELETED, status=HANDLED), Action.DELETE_SNAPSHOT),
        (
            content(deleting=True, annotations=BEING_DELETED, status=HANDLED, policy="Retain"),
            Action.RELEASE,
        ),
        (content(deleting=True, annotations=BEING_DELETED), Action.RELEASE),
        (content(deleting=True, preprovisioned=True, uid=""), Action.RELEASE),
        (
            content(
                deleting=True,
                status=HANDLED,
                annotations={**BEING_DELETED, names.ANN_GROUP_SNAPSHOT_BEING_CREATED: "yes"},
            ),
            Action.CHECK,
        ),
        (content(deleting=True, status=HANDLED), Action.CHECK),
    ],
    ids=[
        "new", "failed-create", "not-ready", "ready", "preprovisioned", "delete", "retain",
        "nothing-on-driver", "unbound-preprovisioned", "being-created-wins", "not-yet-released",
    ],
)  # fmt: skip
def test_next_action(body: dict[str, Any], action: Action) -> None:
    assert groups.next_action(body) is action


def test_member_ids_and_handle() -> None:
    infos = [
        {"volumeHandle": "v1", "snapshotHandle": "a"},
        {"volumeHandle": "v2", "snapshotHandle": "b"},
    ]
    listed = {"volumeSnapshotInfoList": infos}
    assert groups.member_snapshot_ids(content(status=listed)) == ["a", "b"]
    assert groups.member_snapshot_ids(content(preprovisioned=True)) == ["s1", "s2"]
    assert groups.member_snapshot_ids(content()) == []
    assert groups.group_handle(content(preprovisioned=True)) == "gh"
    assert groups.group_handle(content()) is None


def test_status_arithmetic() -> None:
    member = groups.Member(volume="v1", snapshot="a", ready=False, size=5, created_ns=9)
    first = groups.updated_status(None, handle="gh", ready=False, created="T", members=[member])
    assert first == {
        "volumeGroupSnapshotHandle": "gh",
        "readyToUse": False,
        "creationTime": "T",
        "volumeSnapshotInfoList": [
            {"volumeHandle": "v1", "snapshotHandle": "a", "readyToUse": False, "restoreSize": 5,
             "creationTime": 9}
        ],
    }  # fmt: skip
    same = groups.updated_status(first, handle="gh", ready=False, created="U", members=[member])
    assert same is None
    ready = groups.Member(volume="v1", snapshot="a", ready=True, size=5, created_ns=9)
    failed = {**first, "error": {"message": "old"}}
    turned = groups.updated_status(failed, handle="gh", ready=True, created="U", members=[ready])
    assert turned is not None
    assert turned["readyToUse"] is True
    assert turned["creationTime"] == "T"
    assert "error" not in turned
    assert turned["volumeSnapshotInfoList"][0]["readyToUse"] is True
    assert groups.cleared_status_patch() == {
        "status": {"volumeGroupSnapshotHandle": None, "readyToUse": None, "creationTime": None,
                   "error": None}
    }  # fmt: skip


def test_release_patch_is_guarded_and_drops_only_ours() -> None:
    assert decisions.release_patch(content(), finalizer=GroupSnapshotter.finalizer) == {
        "metadata": {"finalizers": ["other"]}  # sent guarded by the resourceVersion read
    }
    released = content()
    released["metadata"]["finalizers"] = ["other"]
    assert decisions.release_patch(released, finalizer=GroupSnapshotter.finalizer) is None


def enqueued(old: dict[str, Any] | None, new: dict[str, Any]) -> bool:
    """The group controller's own rule: its annotation, the shared decision."""
    return decisions.should_enqueue_change(old, new, own=GroupSnapshotter.being_created)


def test_our_own_writes_are_not_enqueued() -> None:
    old = content()
    ours = content(status=HANDLED, annotations={names.ANN_GROUP_SNAPSHOT_BEING_CREATED: "yes"})
    ours["metadata"]["resourceVersion"] = "8"
    assert not enqueued(old, ours)
    assert enqueued(None, old)
    assert enqueued(old, content(deleting=True))
    assert enqueued(old, content(annotations=BEING_DELETED))
