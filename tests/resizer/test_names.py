"""The resizer's compatibility strings, pinned to the Go and Kubernetes API bytes.

We test these aspects:
- each constant has exactly the value external-resizer (pkg/util, pkg/controller,
  pkg/modifycontroller) or the core/v1 API enums use;
- the templates render as the Go `fmt.Sprintf` calls do.
"""

from __future__ import annotations

import pytest

from kopf_csi import names

PINNED = {
    "ANN_STORAGE_RESIZER": "volume.kubernetes.io/storage-resizer",
    "ANN_PRE_RESIZE_CAPACITY": "volume.alpha.kubernetes.io/pre-resize-capacity",
    "ANN_NODE_EXPANSION_NOT_REQUIRED": "volume.kubernetes.io/node-expansion-not-required",
    "RESIZER_EVENT_COMPONENT": "external-resizer {driver}",
    "CONDITION_RESIZING": "Resizing",
    "CONDITION_FS_RESIZE_PENDING": "FileSystemResizePending",
    "CONDITION_CONTROLLER_RESIZE_ERROR": "ControllerResizeError",
    "CONDITION_NODE_RESIZE_ERROR": "NodeResizeError",
    "CONDITION_MODIFYING_VOLUME": "ModifyingVolume",
    "CONDITION_MODIFY_VOLUME_ERROR": "ModifyVolumeError",
    "RESIZE_CONTROLLER_IN_PROGRESS": "ControllerResizeInProgress",
    "RESIZE_CONTROLLER_INFEASIBLE": "ControllerResizeInfeasible",
    "RESIZE_NODE_PENDING": "NodeResizePending",
    "RESIZE_NODE_IN_PROGRESS": "NodeResizeInProgress",
    "RESIZE_NODE_INFEASIBLE": "NodeResizeInfeasible",
    "MODIFY_PENDING": "Pending",
    "MODIFY_IN_PROGRESS": "InProgress",
    "MODIFY_INFEASIBLE": "Infeasible",
    "REASON_RESIZING": "Resizing",
    "REASON_VOLUME_RESIZE_FAILED": "VolumeResizeFailed",
    "REASON_VOLUME_RESIZE_SUCCESSFUL": "VolumeResizeSuccessful",
    "REASON_FS_RESIZE_REQUIRED": "FileSystemResizeRequired",
    "REASON_VOLUME_MODIFY": "VolumeModify",
    "REASON_VOLUME_MODIFY_SUCCESSFUL": "VolumeModifySuccessful",
    "REASON_VOLUME_MODIFY_FAILED": "VolumeModifyFailed",
    "MESSAGE_RESIZING": "External resizer is resizing volume {volume}",
    "MESSAGE_FS_RESIZE_REQUIRED": "Require file system resize of volume on node",
    "MESSAGE_RESIZE_SUCCEEDED": "Resize volume succeeded",
    "MESSAGE_RESIZE_FAILED": 'resize volume "{volume}" by resizer "{driver}" failed: {error}',
    "MESSAGE_OFFLINE_IN_USE": (
        "Unable to expand {claim} because CSI driver {driver} only supports offline expansion"
        " and volume is currently in-use"
    ),
    "MESSAGE_FS_RESIZE_PENDING": (
        "Waiting for user to (re-)start a pod to finish file system resize of volume on node."
    ),
    "MESSAGE_CONTROLLER_RESIZE_ERROR": "failed to expand pvc with {error}",
    "MESSAGE_RESIZE_SLOW_RETRY": (
        "skipping volume expansion for pvc {claim}, because expansion previously failed with"
        " infeasible error"
    ),
    "MESSAGE_MODIFYING": "external resizer is modifying volume {claim} with vac {vac}",
    "MESSAGE_MODIFIED": "external resizer modified volume {claim} with vac {vac} successfully",
    "MESSAGE_VAC_NOT_FOUND": 'VAC "{vac}" does not exist.',
    "MESSAGE_MODIFY_IN_PROGRESS": "ModifyVolume operation in progress.",
    "MESSAGE_MODIFY_ERROR": "ModifyVolume failed with error: {error}. Waiting for retry.",
    "MESSAGE_STILL_MODIFYING": "{error}. Still modifying to VAC {vac}",
    "MESSAGE_MODIFY_SLOW_RETRY": (
        "skipping volume modification for pvc {claim}, because modification previously failed"
        " with infeasible error"
    ),
    "MESSAGE_RESIZE_SECRET_FAILED": "error getting secret {name} in namespace {namespace}: {error}",
}


@pytest.mark.parametrize(
    ("name", "value"), sorted(PINNED.items()), ids=[f"{n} -> exact bytes" for n in sorted(PINNED)]
)
def test_constant_is_byte_identical(name: str, value: str) -> None:
    assert getattr(names, name) == value


@pytest.mark.parametrize(
    ("template", "fields", "expected"),
    [
        (names.MESSAGE_RESIZE_FAILED,
         {"volume": "pvc-1", "driver": "d.example.com",
          "error": "rpc error: code = Internal desc = x"},
         'resize volume "pvc-1" by resizer "d.example.com" failed: '
         "rpc error: code = Internal desc = x"),
        (names.MESSAGE_OFFLINE_IN_USE, {"claim": "ns/data", "driver": "d.example.com"},
         "Unable to expand ns/data because CSI driver d.example.com only supports offline"
         " expansion and volume is currently in-use"),
        (names.RESIZER_EVENT_COMPONENT, {"driver": "hostpath.csi.k8s.io"},
         "external-resizer hostpath.csi.k8s.io"),
        (names.MESSAGE_MODIFY_ERROR, {"error": "rpc error: code = InvalidArgument desc = no"},
         "ModifyVolume failed with error: rpc error: code = InvalidArgument desc = no."
         " Waiting for retry."),
    ],
)  # fmt: skip
def test_templates_render_like_go(template: str, fields: dict[str, str], expected: str) -> None:
    assert template.format(**fields) == expected
