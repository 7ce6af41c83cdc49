"""Every compatibility string in `kopf_csi.names` is pinned to the Go sidecars' exact bytes.

We test these aspects:
- each constant has exactly the value external-provisioner / the library / the KCM use;
- no constant escapes the pinning table (a new one must be pinned here when it is added);
- the reserved parameter set is exactly the stripped keys, no more, no fewer;
- the message templates render as the Go `fmt.Sprintf` calls do;
- the module says, in its docstring, that these values must stay byte-identical.
"""

from __future__ import annotations

import pytest

from kopf_csi import names

PINNED = {
    "ANN_STORAGE_PROVISIONER": "volume.kubernetes.io/storage-provisioner",
    "ANN_BETA_STORAGE_PROVISIONER": "volume.beta.kubernetes.io/storage-provisioner",
    "ANN_SELECTED_NODE": "volume.kubernetes.io/selected-node",
    "ANN_ALPHA_SELECTED_NODE": "volume.alpha.kubernetes.io/selected-node",
    "ANN_MIGRATED_TO": "pv.kubernetes.io/migrated-to",
    "ANN_BETA_STORAGE_CLASS": "volume.beta.kubernetes.io/storage-class",
    "ANN_PROVISIONED_BY": "pv.kubernetes.io/provisioned-by",
    "ANN_BIND_COMPLETED": "pv.kubernetes.io/bind-completed",
    "ANN_BOUND_BY_CONTROLLER": "pv.kubernetes.io/bound-by-controller",
    "ANN_DELETION_SECRET_NAME": "volume.kubernetes.io/provisioner-deletion-secret-name",
    "ANN_DELETION_SECRET_NAMESPACE": "volume.kubernetes.io/provisioner-deletion-secret-namespace",
    "ANN_MODIFY_SECRET_NAME": "volume.kubernetes.io/controller-modify-secret-name",
    "ANN_MODIFY_SECRET_NAMESPACE": "volume.kubernetes.io/controller-modify-secret-namespace",
    "ANN_ALLOW_VOLUME_MODE_CHANGE": "snapshot.storage.kubernetes.io/allow-volume-mode-change",
    "PROVISIONER_IDENTITY_KEY": "storage.kubernetes.io/csiProvisionerIdentity",
    "PARAMETER_PREFIX": "csi.storage.k8s.io/",
    "PARAM_FSTYPE": "csi.storage.k8s.io/fstype",
    "PARAM_SECRET_NAME": "csi.storage.k8s.io/secret-name",
    "PARAM_SECRET_NAMESPACE": "csi.storage.k8s.io/secret-namespace",
    "PARAM_PROVISIONER_SECRET_NAME": "csi.storage.k8s.io/provisioner-secret-name",
    "PARAM_PROVISIONER_SECRET_NAMESPACE": "csi.storage.k8s.io/provisioner-secret-namespace",
    "PARAM_CONTROLLER_PUBLISH_SECRET_NAME": "csi.storage.k8s.io/controller-publish-secret-name",
    "PARAM_CONTROLLER_PUBLISH_SECRET_NAMESPACE": (
        "csi.storage.k8s.io/controller-publish-secret-namespace"
    ),
    "PARAM_NODE_STAGE_SECRET_NAME": "csi.storage.k8s.io/node-stage-secret-name",
    "PARAM_NODE_STAGE_SECRET_NAMESPACE": "csi.storage.k8s.io/node-stage-secret-namespace",
    "PARAM_NODE_PUBLISH_SECRET_NAME": "csi.storage.k8s.io/node-publish-secret-name",
    "PARAM_NODE_PUBLISH_SECRET_NAMESPACE": "csi.storage.k8s.io/node-publish-secret-namespace",
    "PARAM_CONTROLLER_EXPAND_SECRET_NAME": "csi.storage.k8s.io/controller-expand-secret-name",
    "PARAM_CONTROLLER_EXPAND_SECRET_NAMESPACE": (
        "csi.storage.k8s.io/controller-expand-secret-namespace"
    ),
    "PARAM_NODE_EXPAND_SECRET_NAME": "csi.storage.k8s.io/node-expand-secret-name",
    "PARAM_NODE_EXPAND_SECRET_NAMESPACE": "csi.storage.k8s.io/node-expand-secret-namespace",
    "PARAM_CONTROLLER_MODIFY_SECRET_NAME": "csi.storage.k8s.io/controller-modify-secret-name",
    "PARAM_CONTROLLER_MODIFY_SECRET_NAMESPACE": (
        "csi.storage.k8s.io/controller-modify-secret-namespace"
    ),
    "PARAM_DEPRECATED_FSTYPE": "fstype",
    "PARAM_DEPRECATED_PROVISIONER_SECRET_NAME": "csiProvisionerSecretName",
    "PARAM_DEPRECATED_PROVISIONER_SECRET_NAMESPACE": "csiProvisionerSecretNamespace",
    "PARAM_DEPRECATED_CONTROLLER_PUBLISH_SECRET_NAME": "csiControllerPublishSecretName",
    "PARAM_DEPRECATED_CONTROLLER_PUBLISH_SECRET_NAMESPACE": "csiControllerPublishSecretNamespace",
    "PARAM_DEPRECATED_NODE_STAGE_SECRET_NAME": "csiNodeStageSecretName",
    "PARAM_DEPRECATED_NODE_STAGE_SECRET_NAMESPACE": "csiNodeStageSecretNamespace",
    "PARAM_DEPRECATED_NODE_PUBLISH_SECRET_NAME": "csiNodePublishSecretName",
    "PARAM_DEPRECATED_NODE_PUBLISH_SECRET_NAMESPACE": "csiNodePublishSecretNamespace",
    "PARAM_PVC_NAME": "csi.storage.k8s.io/pvc/name",
    "PARAM_PVC_NAMESPACE": "csi.storage.k8s.io/pvc/namespace",
    "PARAM_PV_NAME": "csi.storage.k8s.io/pv/name",
    "KIND_PERSISTENT_VOLUME_CLAIM": "PersistentVolumeClaim",
    "KIND_VOLUME_SNAPSHOT": "VolumeSnapshot",
    "SNAPSHOT_API_GROUP": "snapshot.storage.k8s.io",
    "FINALIZER_PV": "external-provisioner.volume.kubernetes.io/finalizer",
    "FINALIZER_CLONING_PROTECTION": "provisioner.storage.kubernetes.io/cloning-protection",
    "FINALIZER_SNAPSHOT_SOURCE_PROTECTION": (
        "provisioner.storage.kubernetes.io/volumesnapshot-as-source-protection"
    ),
    "DEFAULT_VOLUME_NAME_PREFIX": "pvc",
    "EVENT_COMPONENT": "external-provisioner",
    "LIBRARY_EVENT_COMPONENT": "{driver}_{hostname}_{uuid}",
    "REASON_PROVISIONING": "Provisioning",
    "REASON_PROVISIONING_SUCCEEDED": "ProvisioningSucceeded",
    "REASON_PROVISIONING_FAILED": "ProvisioningFailed",
    "REASON_EXTERNAL_PROVISIONING": "ExternalProvisioning",
    "REASON_VOLUME_FAILED_DELETE": "VolumeFailedDelete",
    "REASON_VOLUME_DELETE": "VolumeDelete",
    "MESSAGE_PROVISIONING": 'External provisioner is provisioning volume for claim "{claim}"',
    "MESSAGE_PROVISIONING_SUCCEEDED": "Successfully provisioned volume {volume}",
    "MESSAGE_EXTERNAL_POPULATOR": "Assuming an external populator will provision the volume",
    "MESSAGE_INFEASIBLE": (
        "Volume provisioning failed with infeasible error. Retries will be delayed. {error}"
    ),
    "MESSAGE_TARGET_NODE_FAILED": "failed to get target node: {error}",
    "MESSAGE_NO_TOPOLOGY": "no available topology found",
    "MESSAGE_RESCHEDULE_FAILED": (
        "delete annotation 'annSelectedNode' for PersistentVolumeClaim \"{claim}\": {error}"
    ),
    "MESSAGE_SLOW_RETRY": (
        "skipping volume provisioning for pvc {uid}, because provisioning previously failed"
        " with infeasible error"
    ),
    "MESSAGE_EXTERNAL_PROVISIONING": (
        "Waiting for a volume to be created either by the external provisioner '{provisioner}'"
        " or manually by the system administrator. If volume creation is delayed, please verify"
        " that the provisioner is running and correctly registered."
    ),
    "MESSAGE_STILL_ATTACHED": "persistentvolume {volume} is still attached to node {node}",
    "MESSAGE_CLONE_IN_PROGRESS": "PVC '{claim}' is in 'Pending' state, cloning in progress",
}


@pytest.mark.parametrize(
    ("name", "value"), sorted(PINNED.items()), ids=[f"{n} -> exact bytes" for n in sorted(PINNED)]
)
def test_constant_is_byte_identical(name: str, value: str) -> None:
    assert getattr(names, name) == value


def test_reserved_parameters_are_exactly_the_stripped_keys() -> None:
    stripped = {v for k, v in PINNED.items() if k.startswith("PARAM_") and "SECRET" in k}
    stripped = {v for v in stripped if v.startswith("csi.storage.k8s.io/")}
    assert stripped | {"csi.storage.k8s.io/fstype"} == names.RESERVED_PARAMETERS
    assert len(names.RESERVED_PARAMETERS) == 17


@pytest.mark.parametrize(
    ("template", "fields", "expected"),
    [
        pytest.param(
            names.MESSAGE_PROVISIONING,
            {"claim": "default/data"},
            'External provisioner is provisioning volume for claim "default/data"',
            id="provisioning event -> quoted namespace/name",
        ),
        pytest.param(
            names.MESSAGE_EXTERNAL_PROVISIONING,
            {"provisioner": "ebs.csi.aws.com"},
            "Waiting for a volume to be created either by the external provisioner"
            " 'ebs.csi.aws.com' or manually by the system administrator. If volume creation is"
            " delayed, please verify that the provisioner is running and correctly registered.",
            id="kcm waiting event -> the exact KCM sentence",
        ),
        pytest.param(
            names.LIBRARY_EVENT_COMPONENT,
            {"driver": "d", "hostname": "h", "uuid": "u"},
            "d_h_u",
            id="library event source -> driver_hostname_uuid",
        ),
    ],
)
def test_templates_render_like_go(template: str, fields: dict[str, str], expected: str) -> None:
    assert template.format(**fields) == expected


def test_docstring_says_byte_identical() -> None:
    assert names.__doc__ is not None
    assert "byte-identical" in names.__doc__
