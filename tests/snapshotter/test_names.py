# ruff: noqa: E501  (pinned strings are kept whole, so that each reads as its Go source)
"""The csi-snapshotter's compatibility strings, pinned to the bytes external-snapshotter uses.

We test these aspects:
- each constant has exactly the value of pkg/utils/util.go, pkg/sidecar-controller and
  pkg/snapshotter (annotation keys, finalizers, parameter keys, event reasons and messages,
  the error texts that end up in `status.error.message`);
- templates render as the Go `fmt.Errorf` texts do (`%q` of an error, `%#v` of a name);
- the CreateSnapshot name is `makeSnapshotName`'s.
"""

from __future__ import annotations

from kopf_csi import names
from kopf_csi.csi import Code, CSIError
from kopf_csi.provisioning.gofmt import go_list
from kopf_csi.snapshotting.decisions import snapshot_name
from kopf_csi.snapshotting.errors import quoted
from kopf_csi.snapshotting.groups import group_snapshot_name

PINNED = {
    "ANN_SNAPSHOT_BEING_CREATED": "snapshot.storage.kubernetes.io/volumesnapshot-being-created",
    "ANN_SNAPSHOT_BEING_DELETED": "snapshot.storage.kubernetes.io/volumesnapshot-being-deleted",
    "ANN_SNAPSHOT_DELETION_SECRET_NAME": "snapshot.storage.kubernetes.io/deletion-secret-name",
    "ANN_SNAPSHOT_DELETION_SECRET_NAMESPACE": "snapshot.storage.kubernetes.io/deletion-secret-namespace",
    "ANN_SNAPSHOT_DEFAULT_CLASS": "snapshot.storage.kubernetes.io/is-default-class",
    "FINALIZER_SNAPSHOT_CONTENT_BOUND": "snapshot.storage.kubernetes.io/volumesnapshotcontent-bound-protection",
    "FINALIZER_SNAPSHOT_BOUND": "snapshot.storage.kubernetes.io/volumesnapshot-bound-protection",
    "FINALIZER_SNAPSHOT_AS_SOURCE": "snapshot.storage.kubernetes.io/volumesnapshot-as-source-protection",
    "SNAPSHOT_CONTENT_NAME_PREFIX": "snapcontent-",
    "DEFAULT_SNAPSHOT_NAME_PREFIX": "snapshot",
    "SNAPSHOTTER_EVENT_COMPONENT": "csi-snapshotter {driver}",
    "PARAM_SNAPSHOTTER_SECRET_NAME": "csi.storage.k8s.io/snapshotter-secret-name",
    "PARAM_SNAPSHOTTER_SECRET_NAMESPACE": "csi.storage.k8s.io/snapshotter-secret-namespace",
    "PARAM_SNAPSHOTTER_LIST_SECRET_NAME": "csi.storage.k8s.io/snapshotter-list-secret-name",
    "PARAM_SNAPSHOTTER_LIST_SECRET_NAMESPACE": "csi.storage.k8s.io/snapshotter-list-secret-namespace",
    "PARAM_GROUP_SNAPSHOTTER_SECRET_NAME": "csi.storage.k8s.io/group-snapshotter-secret-name",
    "PARAM_GROUP_SNAPSHOTTER_SECRET_NAMESPACE": "csi.storage.k8s.io/group-snapshotter-secret-namespace",
    "PARAM_VOLUME_SNAPSHOT_NAME": "csi.storage.k8s.io/volumesnapshot/name",
    "PARAM_VOLUME_SNAPSHOT_NAMESPACE": "csi.storage.k8s.io/volumesnapshot/namespace",
    "PARAM_VOLUME_SNAPSHOT_CONTENT_NAME": "csi.storage.k8s.io/volumesnapshotcontent/name",
    "REASON_SNAPSHOT_CREATION_FAILED": "SnapshotCreationFailed",
    "REASON_SNAPSHOT_CHECK_FAILED": "SnapshotContentCheckandUpdateFailed",
    "REASON_SNAPSHOT_DELETE_ERROR": "SnapshotDeleteError",
    "MESSAGE_SNAPSHOT_CREATION_FAILED": "Failed to create snapshot: {error}",
    "MESSAGE_SNAPSHOT_CHECK_FAILED": "Failed to check and update snapshot content: {error}",
    "MESSAGE_SNAPSHOT_CREDENTIALS_FAILED": "Failed to get snapshot credentials",
    "MESSAGE_SNAPSHOT_DELETE_FAILED": "Failed to delete snapshot",
    "MESSAGE_SNAPSHOT_CLEAR_STATUS_FAILED": "Failed to clear content status",
    "ERROR_SNAPSHOT_INPUT": "failed to get input parameters to create snapshot for content {content}: {quoted}",
    "ERROR_SNAPSHOT_WITHOUT_CLASS": "failed to take snapshot {content} without a snapshot class",
    "ERROR_SNAPSHOT_CLASS_NOT_FOUND": 'volumesnapshotclass.snapshot.storage.k8s.io "{name}" not found',
    "ERROR_SNAPSHOT_SECRET_UNSPECIFIED": "cannot retrieve secrets for snapshot content {quoted}, err: secret name or namespace not specified",
    "ERROR_SNAPSHOT_CREDENTIALS": "cannot get credentials for snapshot content {quoted}",
    "ERROR_SNAPSHOT_SET_BEING_CREATED": "failed to add VolumeSnapshotBeingCreated annotation on the content {content}: {quoted}",
    "ERROR_SNAPSHOT_CONTROLLER_UPDATE": "snapshot controller failed to update {content} on API server: {error}",
    "ERROR_SNAPSHOT_PREFIXED_PARAMETERS": "failed to remove CSI Parameters of prefixed keys: {error}",
    "ERROR_SNAPSHOT_UNKNOWN_PARAMETER": 'found unknown parameter key "{key}" with reserved namespace csi.storage.k8s.io/',
    "ERROR_SNAPSHOT_NOT_BOUND": "cannot create snapshot. Snapshot content {content} not bound to a snapshot",
    "ERROR_SNAPSHOT_TAKE": "failed to take snapshot of the volume {volume}: {quoted}",
    "ERROR_SNAPSHOT_REMOVE_BEING_CREATED_FINAL": "failed to remove VolumeSnapshotBeingCreated annotation from the content {content}: {error}",
    "ERROR_SNAPSHOT_REMOVE_BEING_CREATED": "failed to remove VolumeSnapshotBeingCreated annotation on the content {content}: {quoted}",
    "ERROR_SNAPSHOT_UPDATE_STATUS": "error updating status for volume snapshot content {content}: {error}",
    "ERROR_SNAPSHOT_GET_CONTENT": "error get snapshot content {content} from api server: {error}",
    "ERROR_SNAPSHOT_GET_CLASS": "failed to get snapshot class {name} for snapshot content {content}: {error}",
    "ERROR_SNAPSHOT_SECRET_REFERENCE": "failed to get secret reference for snapshot content {content}: {error}",
    "ERROR_SNAPSHOT_GET_CREDENTIALS": "failed to get credentials for snapshot content {content}: {error}",
    "ERROR_SNAPSHOT_MEMBER_CREDENTIALS": "failed to get credentials from annotation for snapshot content {content}: {error}",
    "ERROR_SNAPSHOT_GET_SECRET": "error getting secret {name} in namespace {namespace}: {error}",
    "ERROR_SNAPSHOT_LIST": "failed to list snapshot for content {content}: {quoted}",
    "ERROR_SNAPSHOT_LIST_NO_HANDLE": "failed to list snapshot for content {content}: snapshotHandle is missing",
    "ERROR_SNAPSHOT_LIST_SUPPORTED": "failed to check if ListSnapshots is supported: {error}",
    "ERROR_SNAPSHOT_NOT_FOUND": "can not find snapshot for snapshotID {snapshot_id}",
    "ERROR_SNAPSHOT_DELETE": "failed to delete snapshot content {content}: {quoted}",
    "ERROR_SNAPSHOT_DELETE_NO_HANDLE": "failed to delete snapshot content {content}: snapshotHandle is missing",
    "ERROR_SNAPSHOT_SECRET_TEMPLATES": "failed to get name and namespace template from params: {error}",
    "ERROR_SNAPSHOT_SECRET_HALF": "either name and namespace for {kind} secrets specified, Both must be specified",
    "ERROR_SNAPSHOT_SECRET_EMPTY": "{kind} secrets specified in parameters but value of either namespace or name is empty",
    "ERROR_SNAPSHOT_SECRET_RESOLVE": "error resolving value {quoted}: {error}",
    "ERROR_SNAPSHOT_NAMESPACE_RESOLVED_INVALID": "{quoted} resolved to {resolved} which is not a valid namespace name",
    "ERROR_SNAPSHOT_NAMESPACE_INVALID": "{quoted} is not a valid namespace name",
    "ERROR_SNAPSHOT_NAME_RESOLVED_INVALID": "{quoted} resolved to {resolved} which is not a valid secret name",
    "ERROR_SNAPSHOT_NAME_INVALID": "{quoted} is not a valid secret name",
    # The group snapshot controller (pkg/utils/util.go, groupsnapshot_helper.go, csi_handler.go).
    "KIND_VOLUME_GROUP_SNAPSHOT": "VolumeGroupSnapshot",
    "ANN_GROUP_SNAPSHOT_BEING_CREATED": "groupsnapshot.storage.kubernetes.io/volumegroupsnapshot-being-created",
    "ANN_GROUP_SNAPSHOT_BEING_DELETED": "groupsnapshot.storage.kubernetes.io/volumegroupsnapshot-being-deleted",
    "ANN_GROUP_SNAPSHOT_DELETION_SECRET_NAME": "groupsnapshot.storage.kubernetes.io/deletion-secret-name",
    "ANN_GROUP_SNAPSHOT_DELETION_SECRET_NAMESPACE": "groupsnapshot.storage.kubernetes.io/deletion-secret-namespace",
    "ANN_GROUP_SNAPSHOT_DEFAULT_CLASS": "groupsnapshot.storage.kubernetes.io/is-default-class",
    "ANN_GROUP_SNAPSHOT_HANDLE": "groupsnapshot.storage.k8s.io/volumeGroupSnapshotHandle",
    "FINALIZER_GROUP_SNAPSHOT_CONTENT_BOUND": "groupsnapshot.storage.kubernetes.io/volumegroupsnapshotcontent-bound-protection",
    "FINALIZER_GROUP_SNAPSHOT_BOUND": "groupsnapshot.storage.kubernetes.io/volumegroupsnapshot-bound-protection",
    "FINALIZER_SNAPSHOT_IN_GROUP": "snapshot.storage.kubernetes.io/volumesnapshot-in-group-protection",
    "LABEL_GROUP_SNAPSHOT_NAME": "groupsnapshot.storage.k8s.io/volumeGroupSnapshotName",
    "GROUP_SNAPSHOT_CONTENT_NAME_PREFIX": "groupsnapcontent-",
    "DEFAULT_GROUP_SNAPSHOT_NAME_PREFIX": "groupsnapshot",
    "PARAM_VOLUME_GROUP_SNAPSHOT_NAME": "csi.storage.k8s.io/volumegroupsnapshot/name",
    "PARAM_VOLUME_GROUP_SNAPSHOT_NAMESPACE": "csi.storage.k8s.io/volumegroupsnapshot/namespace",
    "PARAM_VOLUME_GROUP_SNAPSHOT_CONTENT_NAME": "csi.storage.k8s.io/volumegroupsnapshotcontent/name",
    "REASON_GROUP_SNAPSHOT_CREATION_FAILED": "GroupSnapshotCreationFailed",
    "REASON_GROUP_SNAPSHOT_CHECK_FAILED": "GroupSnapshotContentCheckandUpdateFailed",
    "REASON_GROUP_SNAPSHOT_DELETE_ERROR": "GroupSnapshotDeleteError",
    "MESSAGE_GROUP_SNAPSHOT_CREATION_FAILED": "Failed to create group snapshot: {error}",
    "MESSAGE_GROUP_SNAPSHOT_CHECK_FAILED": "Failed to check and update group snapshot content: {error}",
    "MESSAGE_GROUP_SNAPSHOT_CREDENTIALS_FAILED": "Failed to get snapshot credentials",
    "MESSAGE_GROUP_SNAPSHOT_DELETE_FAILED": "Failed to delete group snapshot",
    "MESSAGE_GROUP_SNAPSHOT_CLEAR_STATUS_FAILED": "Failed to clear content status",
    "ERROR_GROUP_SNAPSHOT_INPUT": "failed to get input parameters to create group snapshot for group snapshot content {content}: {quoted}",
    "ERROR_GROUP_SNAPSHOT_WITHOUT_CLASS": "failed to take group snapshot {content} without a group snapshot class",
    "ERROR_GROUP_SNAPSHOT_CLASS_NOT_FOUND": 'volumegroupsnapshotclass.groupsnapshot.storage.k8s.io "{name}" not found',
    "ERROR_GROUP_SNAPSHOT_SECRET_UNSPECIFIED": "cannot retrieve secrets for group snapshot content {quoted}, err: secret name or namespace not specified",
    "ERROR_GROUP_SNAPSHOT_CREDENTIALS": "cannot get credentials for group snapshot content {quoted}",
    "ERROR_GROUP_SNAPSHOT_SET_BEING_CREATED": "failed to add VolumeGroupSnapshotBeingCreated annotation on the group snapshot content {content}: {quoted}",
    "ERROR_GROUP_SNAPSHOT_REMOVE_BEING_CREATED_FINAL": "failed to remove VolumeGroupSnapshotBeingCreated annotation from the group snapshot content {content}: {error}",
    "ERROR_GROUP_SNAPSHOT_REMOVE_BEING_CREATED": "failed to remove VolumeGroupSnapshotBeingCreated annotation on the groupSnapshotContent {content}: {quoted}",
    "ERROR_GROUP_SNAPSHOT_NOT_BOUND": "cannot create group snapshot. Group snapshot content {content} not bound to a group snapshot",
    "ERROR_GROUP_SNAPSHOT_TAKE": "failed to take group snapshot of the volumes {volumes}: {quoted}",
    "ERROR_GROUP_SNAPSHOT_UPDATE_STATUS": "error updating status for volume group snapshot content {content}: {error}",
    "ERROR_GROUP_SNAPSHOT_GET_CONTENT": "error get group snapshot content {content} from api server: {error}",
    "ERROR_GROUP_SNAPSHOT_GET_CLASS": "failed to get group snapshot class {name} for group snapshot content {content}: {error}",
    "ERROR_GROUP_SNAPSHOT_SECRET_REFERENCE": "failed to get secret reference for group snapshot content {content}: {error}",
    "ERROR_GROUP_SNAPSHOT_GET_CREDENTIALS": "failed to get credentials for group snapshot content {content}: {error}",
    "ERROR_GROUP_SNAPSHOT_NO_VOLUMES": "cannot create group snapshot. PVCs to be snapshotted not found in group snapshot content {content}",
    "ERROR_GROUP_SNAPSHOT_STATUS": "failed to list group snapshot for group snapshot content {content}: {quoted}",
    "ERROR_GROUP_SNAPSHOT_STATUS_NO_IDS": "cannot list group snapshot {content}. No snapshots found in the group snapshot content",
    "ERROR_GROUP_SNAPSHOT_STATUS_NO_HANDLE": "failed to list group snapshot for group snapshot content {content}: groupSnapshotHandle is missing",
    "ERROR_GROUP_SNAPSHOT_DELETE": "failed to delete group snapshot {quoted}, err: {error}",
    "ERROR_GROUP_SNAPSHOT_DELETE_NO_IDS": "cannot delete group snapshot content {content}. No snapshots found in the group snapshot",
    "ERROR_GROUP_SNAPSHOT_DELETE_NO_HANDLE": "failed to delete group snapshot content {content}: groupsnapshotHandle is missing",
}


def test_each_string_is_pinned() -> None:
    for key, value in PINNED.items():
        assert getattr(names, key) == value, key


def test_the_take_snapshot_error_quotes_the_grpc_text() -> None:
    error = CSIError("no space", method="/csi.v1.Controller/CreateSnapshot", code=Code.INTERNAL)
    text = names.ERROR_SNAPSHOT_TAKE.format(volume="vol-1", quoted=quoted(error))
    assert (
        text
        == 'failed to take snapshot of the volume vol-1: "rpc error: code = Internal desc = no space"'
    )


def test_an_inner_quoted_error_is_escaped_as_go_does() -> None:
    inner = names.ERROR_SNAPSHOT_CREDENTIALS.format(quoted=quoted("snapcontent-1"))
    outer = names.ERROR_SNAPSHOT_INPUT.format(content="snapcontent-1", quoted=quoted(inner))
    assert outer == (
        "failed to get input parameters to create snapshot for content snapcontent-1:"
        ' "cannot get credentials for snapshot content \\"snapcontent-1\\""'
    )


def test_snapshot_names_follow_make_snapshot_name() -> None:
    uid = "3c9a1f2e-6b1d-4c55-9d6e-0a1b2c3d4e5f"
    assert snapshot_name("snapshot", uid) == f"snapshot-{uid}"
    assert snapshot_name("snap", uid, 8) == "snap-3c9a1f2e"
    assert snapshot_name("snap", uid, 12) == "snap-3c9a1f2e6b1d"


def test_the_take_group_snapshot_error_lists_the_volumes_as_go_prints_a_slice() -> None:
    error = CSIError("boom", method="/csi.v1.GroupController/CreateVolumeGroupSnapshot",
                     code=Code.INTERNAL)  # fmt: skip
    text = names.ERROR_GROUP_SNAPSHOT_TAKE.format(
        volumes=go_list(["vol-1", "vol-2"]), quoted=quoted(error)
    )
    assert text == (
        'failed to take group snapshot of the volumes [vol-1 vol-2]: "rpc error: code = Internal'
        ' desc = boom"'
    )
    message = names.MESSAGE_GROUP_SNAPSHOT_CREATION_FAILED.format(error=text)
    assert message.startswith("Failed to create group snapshot: failed to take group snapshot")


def test_group_snapshot_names_follow_make_group_snapshot_name() -> None:
    uid = "3c9a1f2e-6b1d-4c55-9d6e-0a1b2c3d4e5f"
    assert group_snapshot_name("groupsnapshot", uid) == f"groupsnapshot-{uid}"
    assert group_snapshot_name("grp", uid, 4) == "grp-3c9a"
