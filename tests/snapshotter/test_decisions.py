"""The snapshotter's pure decisions, table by table.

We test these aspects:
- `next_action` (syncContent's dispatch) and `should_delete` over the content states;
- `is_driver_match`: a source, our driver, no class of another driver;
- `should_enqueue_change` ignores status, finalizers, resourceVersion, our own annotation;
- `updated_status` fills only empty fields, follows readyToUse, drops an error once ready;
- a group member (the snapshot-controller's annotation) is never created, only checked once
  its status names its snapshot, and only released when deleted;
- `error_status_patch` is None for the same message; `release_patch` drops only our finalizer;
- `driver_parameters` and `secret_reference` with Go's error texts; `is_final`'s table;
- `SnapshotterOptions` refuses nonsense.
"""

from __future__ import annotations

from typing import Any

import pytest

from kopf_csi import names
from kopf_csi.csi import Code, CSIError, CSITimeoutError
from kopf_csi.snapshotting import decisions, parameters
from kopf_csi.snapshotting.decisions import Action
from kopf_csi.snapshotting.errors import SnapshotError, is_final
from kopf_csi.snapshotting.options import SnapshotterOptions

CREATING = {names.ANN_SNAPSHOT_BEING_CREATED: "yes"}
DELETING = {names.ANN_SNAPSHOT_BEING_DELETED: "yes"}
MEMBER = {names.ANN_GROUP_SNAPSHOT_HANDLE: "g"}
IN_GROUP = {"volumeGroupSnapshotHandle": "g"}


def vsc(
    *,
    volume: str | None = "vol-1",
    handle: str | None = None,
    status: dict[str, Any] | None = None,
    annotations: dict[str, str] | None = None,
    deleted: bool = False,
    policy: str = "Delete",
    uid: str = "uid-1",
) -> dict[str, Any]:
    source = {"volumeHandle": volume} if volume else {"snapshotHandle": handle}
    meta: dict[str, Any] = {"name": "c", "annotations": annotations or {}}
    if deleted:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    body: dict[str, Any] = {
        "metadata": meta,
        "spec": {"driver": "d", "deletionPolicy": policy, "source": source,
                 "volumeSnapshotRef": {"name": "s", "namespace": "ns", "uid": uid}},
    }  # fmt: skip
    if status is not None:
        body["status"] = status
    return body


READY = {"snapshotHandle": "h", "readyToUse": True}


@pytest.mark.parametrize(
    ("content", "action"),
    [
        pytest.param(vsc(), Action.CREATE, id="dynamic-without-status"),
        pytest.param(vsc(status={"readyToUse": False}), Action.CHECK, id="failed-before"),
        pytest.param(vsc(status=READY), Action.READY, id="ready"),
        pytest.param(vsc(volume=None, handle="h"), Action.CHECK, id="pre-provisioned"),
        pytest.param(vsc(status=READY, deleted=True), Action.READY, id="deleted-not-marked"),
        pytest.param(
            vsc(status=READY, deleted=True, annotations=DELETING),
            Action.DELETE_SNAPSHOT,
            id="deleted-policy-delete",
        ),
        pytest.param(
            vsc(status=READY, deleted=True, annotations=DELETING, policy="Retain"),
            Action.RELEASE,
            id="deleted-policy-retain",
        ),
        pytest.param(
            vsc(status={"readyToUse": None}, deleted=True, annotations=DELETING),
            Action.RELEASE,
            id="deleted-nothing-on-the-driver",
        ),
        pytest.param(
            vsc(deleted=True, annotations={**DELETING, **CREATING}),
            Action.CREATE,
            id="deleted-while-being-created",
        ),
        pytest.param(
            vsc(volume=None, handle="h", uid="", deleted=True, status=READY),
            Action.DELETE_SNAPSHOT,
            id="unbound-pre-provisioned-deleted",
        ),
        pytest.param(vsc(annotations=MEMBER), Action.CHECK, id="member-without-status"),
        pytest.param(
            vsc(annotations=MEMBER, status={**READY, **IN_GROUP}), Action.READY, id="member-ready"
        ),
        pytest.param(
            vsc(annotations={**MEMBER, **DELETING}, status={**READY, **IN_GROUP}, deleted=True),
            Action.RELEASE,
            id="member-deleted",
        ),
    ],
)
def test_next_action(content: dict[str, Any], action: Action) -> None:
    assert decisions.next_action(content) is action


def test_driver_match() -> None:
    classes = {"mine": {"driver": "d"}, "theirs": {"driver": "x"}}
    match = lambda c: decisions.is_driver_match(c, driver="d", class_of=classes.get)  # noqa: E731
    assert match(vsc())
    assert not match(vsc(volume=None, handle=None))
    other = vsc()
    other["spec"]["driver"] = "x"
    assert not match(other)
    with_class = vsc()
    with_class["spec"]["volumeSnapshotClassName"] = "theirs"
    assert not match(with_class)
    with_class["spec"]["volumeSnapshotClassName"] = "unknown"  # not cached: still ours
    assert match(with_class)


def test_changes_of_our_own_fields_are_not_queued() -> None:
    old = vsc(status={"readyToUse": False})
    old["metadata"]["resourceVersion"] = "1"
    new = vsc(status=READY, annotations=CREATING)
    new["metadata"].update(resourceVersion="2", finalizers=["f"])
    assert not decisions.should_enqueue_change(old, new)
    assert decisions.should_enqueue_change(old, vsc(annotations=DELETING))
    assert decisions.should_enqueue_change(old, vsc(deleted=True))
    assert decisions.should_enqueue_change(None, old)


def test_updated_status() -> None:
    fresh = decisions.updated_status(None, handle="h", ready=False, created_ns=5, size=0)
    assert fresh == {"snapshotHandle": "h", "readyToUse": False, "creationTime": 5}
    error = {"message": "m", "time": "t"}
    old = {"readyToUse": False, "error": error}
    ready = decisions.updated_status(old, handle="h", ready=True, created_ns=5, size=7)
    assert ready == {"snapshotHandle": "h", "readyToUse": True, "creationTime": 5, "restoreSize": 7}
    same = {"snapshotHandle": "h", "readyToUse": True, "creationTime": 1, "restoreSize": 7}
    assert decisions.updated_status(same, handle="x", ready=True, created_ns=9, size=8) is None
    still = decisions.updated_status(old, handle="h", ready=False, created_ns=5, size=0)
    assert still is not None
    assert still["error"] == error
    grouped = decisions.updated_status(None, handle="h", ready=True, created_ns=5, size=0,
                                       group_handle="g")  # fmt: skip
    assert grouped == {"snapshotHandle": "h", "readyToUse": True, "creationTime": 5, **IN_GROUP}
    current = {**READY, **IN_GROUP, "creationTime": 1}
    kept = decisions.updated_status(
        current, handle="h", ready=True, created_ns=5, size=0, group_handle="other"
    )
    assert kept is None  # only an empty group handle is filled in


def test_group_members() -> None:
    assert decisions.is_group_member(vsc(annotations=MEMBER))
    assert not decisions.is_group_member(vsc(status=IN_GROUP))
    assert decisions.member_status_handle(vsc(status={**READY, **IN_GROUP})) == "h"
    assert decisions.member_status_handle(vsc(status=READY)) is None
    assert decisions.member_status_handle(vsc(status=IN_GROUP)) is None


def test_error_status_and_release_patches() -> None:
    content = vsc(status={"readyToUse": False, "error": {"message": "m"}})
    assert decisions.error_status_patch(content, "m", "now") is None
    assert decisions.error_status_patch(vsc(), "m", "now") == {
        "status": {"readyToUse": False, "error": {"time": "now", "message": "m"}}
    }
    content["metadata"]["finalizers"] = ["a", names.FINALIZER_SNAPSHOT_CONTENT_BOUND]
    assert decisions.release_patch(content) == {"metadata": {"finalizers": ["a"]}}
    assert decisions.release_patch(vsc()) is None


def test_driver_parameters() -> None:
    given = {
        "tier": "gold",
        "csiProvisionerSecretName": "kept",
        names.PARAM_SNAPSHOTTER_SECRET_NAME: "s",
        names.PARAM_SNAPSHOTTER_LIST_SECRET_NAMESPACE: "ns",
    }
    assert parameters.driver_parameters(given) == {
        "tier": "gold",
        "csiProvisionerSecretName": "kept",
    }
    with pytest.raises(parameters.ParameterError) as info:
        parameters.driver_parameters({"csi.storage.k8s.io/fstype": "ext4"})
    assert str(info.value) == (
        "failed to remove CSI Parameters of prefixed keys: found unknown parameter key"
        ' "csi.storage.k8s.io/fstype" with reserved namespace csi.storage.k8s.io/'
    )


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({}, None),
        (
            {names.PARAM_SNAPSHOTTER_SECRET_NAME: "${volumesnapshot.name}-x",
             names.PARAM_SNAPSHOTTER_SECRET_NAMESPACE: "${volumesnapshot.namespace}"},
            parameters.SecretRef(name="snap-x", namespace="ns"),
        ),
        (
            {names.PARAM_SNAPSHOTTER_SECRET_NAME: "s"},
            "failed to get name and namespace template from params: either name and namespace"
            " for Snapshotter secrets specified, Both must be specified",
        ),
        (
            {names.PARAM_SNAPSHOTTER_SECRET_NAME: "s",
             names.PARAM_SNAPSHOTTER_SECRET_NAMESPACE: ""},
            "failed to get name and namespace template from params: Snapshotter secrets"
            " specified in parameters but value of either namespace or name is empty",
        ),
        (
            {names.PARAM_SNAPSHOTTER_SECRET_NAME: "s",
             names.PARAM_SNAPSHOTTER_SECRET_NAMESPACE: "${pvc.namespace}"},
            'error resolving value "${pvc.namespace}": invalid tokens: ["pvc.namespace"]',
        ),
        (
            {names.PARAM_SNAPSHOTTER_SECRET_NAME: "${volumesnapshot.name}",
             names.PARAM_SNAPSHOTTER_SECRET_NAMESPACE: "Bad_NS"},
            '"Bad_NS" is not a valid namespace name',
        ),
        (
            {names.PARAM_SNAPSHOTTER_SECRET_NAME: "${volumesnapshot.name}_",
             names.PARAM_SNAPSHOTTER_SECRET_NAMESPACE: "ns"},
            '"${volumesnapshot.name}_" resolved to "snap_" which is not a valid secret name',
        ),
    ],
)  # fmt: skip
def test_secret_reference(params: dict[str, str], expected: object) -> None:
    snapshot = {"metadata": {"name": "snap", "namespace": "ns"}}

    def resolve() -> object:
        return parameters.secret_reference(
            parameters.SNAPSHOTTER_SECRET, params, content_name="c", snapshot=snapshot
        )

    if isinstance(expected, str):
        with pytest.raises(parameters.ParameterError) as info:
            resolve()
        assert str(info.value) == expected
    else:
        assert resolve() == expected


@pytest.mark.parametrize("code", list(Code))
def test_is_final(code: Code) -> None:
    in_progress = {
        Code.CANCELLED,
        Code.DEADLINE_EXCEEDED,
        Code.UNAVAILABLE,
        Code.RESOURCE_EXHAUSTED,
        Code.ABORTED,
    }
    error = CSIError("x", method="m", code=code)
    assert is_final(error) is (code not in in_progress)


def test_is_final_for_timeouts_and_other_errors() -> None:
    assert not is_final(CSITimeoutError("t", method="m"))
    assert not is_final(SnapshotError("not a gRPC error"))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"retry_interval_start": 0},
        {"retry_interval_start": 10, "retry_interval_max": 1},
        {"timeout": 0},
        {"workers": 0},
        {"snapshot_name_prefix": ""},
        {"snapshot_name_uuid_length": 0},
        {"snapshot_name_uuid_length": -2},
    ],
)
def test_options_refuse_nonsense(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"must|needs"):
        SnapshotterOptions(**kwargs)


def test_option_defaults_are_the_go_flags() -> None:
    options = SnapshotterOptions()
    assert (options.timeout, options.workers, options.resync_period) == (60.0, 10, 900.0)
    assert (options.retry_interval_start, options.retry_interval_max) == (1.0, 300.0)
    assert (options.snapshot_name_prefix, options.snapshot_name_uuid_length) == ("snapshot", -1)
    assert options.extra_create_metadata is False
