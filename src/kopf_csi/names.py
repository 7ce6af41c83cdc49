"""Every string that other Kubernetes components, users or the Go sidecars read from our objects.

These are a compatibility contract, not a style choice: the kube-controller-manager, the
scheduler, the kubelet, the Go sidecars (when a cluster switches back to them) and users'
tooling all match on them byte for byte. A PV written by kopf-csi must be indistinguishable from
one written by external-provisioner v6 with sig-storage-lib-external-provisioner v13, and the other
way round. So every value here must stay byte-identical to the Go code it was taken from, and a
test pins each one; a "fix" to any of them is a breaking change to the cluster.

Names are grouped by who reads them: annotations (`ANN_*`), StorageClass parameter keys
(`PARAM_*`), finalizers (`FINALIZER_*`), event reasons (`REASON_*`) and event messages
(`MESSAGE_*`, as `str.format` templates with named fields). The attacher, the resizer and the
snapshotter add their own strings here, in their own sections.
"""

from __future__ import annotations

from typing import Final

# --- Annotations on PersistentVolumeClaims (set by the KCM and the scheduler, read by us) ---

ANN_STORAGE_PROVISIONER: Final = "volume.kubernetes.io/storage-provisioner"
ANN_BETA_STORAGE_PROVISIONER: Final = "volume.beta.kubernetes.io/storage-provisioner"
ANN_SELECTED_NODE: Final = "volume.kubernetes.io/selected-node"
ANN_ALPHA_SELECTED_NODE: Final = "volume.alpha.kubernetes.io/selected-node"
ANN_MIGRATED_TO: Final = "pv.kubernetes.io/migrated-to"
ANN_BETA_STORAGE_CLASS: Final = "volume.beta.kubernetes.io/storage-class"

# --- Annotations on PersistentVolumes (written by us, read by the KCM, the resizer, us) ---

ANN_PROVISIONED_BY: Final = "pv.kubernetes.io/provisioned-by"
ANN_BIND_COMPLETED: Final = "pv.kubernetes.io/bind-completed"
ANN_BOUND_BY_CONTROLLER: Final = "pv.kubernetes.io/bound-by-controller"
ANN_DELETION_SECRET_NAME: Final = "volume.kubernetes.io/provisioner-deletion-secret-name"
ANN_DELETION_SECRET_NAMESPACE: Final = "volume.kubernetes.io/provisioner-deletion-secret-namespace"
ANN_MODIFY_SECRET_NAME: Final = "volume.kubernetes.io/controller-modify-secret-name"
ANN_MODIFY_SECRET_NAMESPACE: Final = "volume.kubernetes.io/controller-modify-secret-namespace"

# --- Annotations on VolumeSnapshotContents (read by us) ---

ANN_ALLOW_VOLUME_MODE_CHANGE: Final = "snapshot.storage.kubernetes.io/allow-volume-mode-change"

# --- The PV's spec.csi.volumeAttributes key naming the provisioner instance ---

PROVISIONER_IDENTITY_KEY: Final = "storage.kubernetes.io/csiProvisionerIdentity"

# --- StorageClass parameters reserved for the provisioner (stripped before CreateVolume) ---

PARAMETER_PREFIX: Final = "csi.storage.k8s.io/"
PARAM_FSTYPE: Final = "csi.storage.k8s.io/fstype"
PARAM_SECRET_NAME: Final = "csi.storage.k8s.io/secret-name"
PARAM_SECRET_NAMESPACE: Final = "csi.storage.k8s.io/secret-namespace"
PARAM_PROVISIONER_SECRET_NAME: Final = "csi.storage.k8s.io/provisioner-secret-name"
PARAM_PROVISIONER_SECRET_NAMESPACE: Final = "csi.storage.k8s.io/provisioner-secret-namespace"
PARAM_CONTROLLER_PUBLISH_SECRET_NAME: Final = "csi.storage.k8s.io/controller-publish-secret-name"
PARAM_CONTROLLER_PUBLISH_SECRET_NAMESPACE: Final = (
    "csi.storage.k8s.io/controller-publish-secret-namespace"
)
PARAM_NODE_STAGE_SECRET_NAME: Final = "csi.storage.k8s.io/node-stage-secret-name"
PARAM_NODE_STAGE_SECRET_NAMESPACE: Final = "csi.storage.k8s.io/node-stage-secret-namespace"
PARAM_NODE_PUBLISH_SECRET_NAME: Final = "csi.storage.k8s.io/node-publish-secret-name"
PARAM_NODE_PUBLISH_SECRET_NAMESPACE: Final = "csi.storage.k8s.io/node-publish-secret-namespace"
PARAM_CONTROLLER_EXPAND_SECRET_NAME: Final = "csi.storage.k8s.io/controller-expand-secret-name"
PARAM_CONTROLLER_EXPAND_SECRET_NAMESPACE: Final = (
    "csi.storage.k8s.io/controller-expand-secret-namespace"
)
PARAM_NODE_EXPAND_SECRET_NAME: Final = "csi.storage.k8s.io/node-expand-secret-name"
PARAM_NODE_EXPAND_SECRET_NAMESPACE: Final = "csi.storage.k8s.io/node-expand-secret-namespace"
PARAM_CONTROLLER_MODIFY_SECRET_NAME: Final = "csi.storage.k8s.io/controller-modify-secret-name"
PARAM_CONTROLLER_MODIFY_SECRET_NAMESPACE: Final = (
    "csi.storage.k8s.io/controller-modify-secret-namespace"
)

RESERVED_PARAMETERS: Final = frozenset(
    {
        PARAM_FSTYPE,
        PARAM_SECRET_NAME,
        PARAM_SECRET_NAMESPACE,
        PARAM_PROVISIONER_SECRET_NAME,
        PARAM_PROVISIONER_SECRET_NAMESPACE,
        PARAM_CONTROLLER_PUBLISH_SECRET_NAME,
        PARAM_CONTROLLER_PUBLISH_SECRET_NAMESPACE,
        PARAM_NODE_STAGE_SECRET_NAME,
        PARAM_NODE_STAGE_SECRET_NAMESPACE,
        PARAM_NODE_PUBLISH_SECRET_NAME,
        PARAM_NODE_PUBLISH_SECRET_NAMESPACE,
        PARAM_CONTROLLER_EXPAND_SECRET_NAME,
        PARAM_CONTROLLER_EXPAND_SECRET_NAMESPACE,
        PARAM_NODE_EXPAND_SECRET_NAME,
        PARAM_NODE_EXPAND_SECRET_NAMESPACE,
        PARAM_CONTROLLER_MODIFY_SECRET_NAME,
        PARAM_CONTROLLER_MODIFY_SECRET_NAMESPACE,
    }
)
"""The `csi.storage.k8s.io/*` keys we understand; any other key under the prefix is an error."""

# Deprecated keys: still honoured, but passed through to CreateVolume (never stripped).
PARAM_DEPRECATED_FSTYPE: Final = "fstype"  # matched case-insensitively
PARAM_DEPRECATED_PROVISIONER_SECRET_NAME: Final = "csiProvisionerSecretName"
PARAM_DEPRECATED_PROVISIONER_SECRET_NAMESPACE: Final = "csiProvisionerSecretNamespace"
PARAM_DEPRECATED_CONTROLLER_PUBLISH_SECRET_NAME: Final = "csiControllerPublishSecretName"
PARAM_DEPRECATED_CONTROLLER_PUBLISH_SECRET_NAMESPACE: Final = "csiControllerPublishSecretNamespace"
PARAM_DEPRECATED_NODE_STAGE_SECRET_NAME: Final = "csiNodeStageSecretName"
PARAM_DEPRECATED_NODE_STAGE_SECRET_NAMESPACE: Final = "csiNodeStageSecretNamespace"
PARAM_DEPRECATED_NODE_PUBLISH_SECRET_NAME: Final = "csiNodePublishSecretName"
PARAM_DEPRECATED_NODE_PUBLISH_SECRET_NAMESPACE: Final = "csiNodePublishSecretNamespace"

# Added to the CreateVolume parameters by --extra-create-metadata.
PARAM_PVC_NAME: Final = "csi.storage.k8s.io/pvc/name"
PARAM_PVC_NAMESPACE: Final = "csi.storage.k8s.io/pvc/namespace"
PARAM_PV_NAME: Final = "csi.storage.k8s.io/pv/name"

# --- Kinds and groups of data sources ---

KIND_PERSISTENT_VOLUME_CLAIM: Final = "PersistentVolumeClaim"
KIND_VOLUME_SNAPSHOT: Final = "VolumeSnapshot"
SNAPSHOT_API_GROUP: Final = "snapshot.storage.k8s.io"

# --- Finalizers ---

FINALIZER_PV: Final = "external-provisioner.volume.kubernetes.io/finalizer"
FINALIZER_CLONING_PROTECTION: Final = "provisioner.storage.kubernetes.io/cloning-protection"
FINALIZER_SNAPSHOT_SOURCE_PROTECTION: Final = (
    "provisioner.storage.kubernetes.io/volumesnapshot-as-source-protection"
)

# --- Names ---

DEFAULT_VOLUME_NAME_PREFIX: Final = "pvc"
EVENT_COMPONENT: Final = "external-provisioner"
"""The event source of the events the CSI part emits itself (the external-populator one)."""
LIBRARY_EVENT_COMPONENT: Final = "{driver}_{hostname}_{uuid}"
"""The event source of the library's events (Provisioning, ProvisioningSucceeded, ...)."""

# --- Event reasons ---

REASON_PROVISIONING: Final = "Provisioning"
REASON_PROVISIONING_SUCCEEDED: Final = "ProvisioningSucceeded"
REASON_PROVISIONING_FAILED: Final = "ProvisioningFailed"
REASON_EXTERNAL_PROVISIONING: Final = "ExternalProvisioning"  # the KCM's, not ours
REASON_VOLUME_FAILED_DELETE: Final = "VolumeFailedDelete"
REASON_VOLUME_DELETE: Final = "VolumeDelete"  # Normal: waiting for a detach (upstream #1574)

# --- Event messages (`str.format` templates) ---

MESSAGE_PROVISIONING: Final = 'External provisioner is provisioning volume for claim "{claim}"'
"""Normal `Provisioning` on every attempt; `claim` is `namespace/name` (klog.KObj)."""
MESSAGE_PROVISIONING_SUCCEEDED: Final = "Successfully provisioned volume {volume}"
MESSAGE_EXTERNAL_POPULATOR: Final = "Assuming an external populator will provision the volume"
"""Normal `Provisioning` when the data source is neither a PVC nor a VolumeSnapshot."""
MESSAGE_INFEASIBLE: Final = (
    "Volume provisioning failed with infeasible error. Retries will be delayed. {error}"
)
"""Warning `ProvisioningFailed` when CreateVolume says InvalidArgument."""
MESSAGE_TARGET_NODE_FAILED: Final = "failed to get target node: {error}"
"""Warning `ProvisioningFailed` when the selected Node cannot be read (other than NotFound)."""
MESSAGE_RESCHEDULE_FAILED: Final = (
    "delete annotation 'annSelectedNode' for PersistentVolumeClaim \"{claim}\": {error}"
)
"""The error (logged, then retried) when removing the selected-node annotation fails."""
MESSAGE_SLOW_RETRY: Final = (
    "skipping volume provisioning for pvc {uid}, because provisioning previously failed with"
    " infeasible error"
)
"""The error that delays a claim after an infeasible failure (no event)."""
MESSAGE_EXTERNAL_PROVISIONING: Final = (
    "Waiting for a volume to be created either by the external provisioner '{provisioner}' or"
    " manually by the system administrator. If volume creation is delayed, please verify that"
    " the provisioner is running and correctly registered."
)
"""The KCM's Normal `ExternalProvisioning`; kept for the emulated control plane and tests."""
MESSAGE_STILL_ATTACHED: Final = "persistentvolume {volume} is still attached to node {node}"
"""Warning `VolumeFailedDelete` while a VolumeAttachment still references the PV."""
MESSAGE_CLONE_IN_PROGRESS: Final = "PVC '{claim}' is in 'Pending' state, cloning in progress"
"""Why the cloning-protection finalizer stays on a deleted source PVC (logged, retried)."""

# --- external-attacher: finalizer, VolumeAttachment annotation, status errors ---
# (pkg/controller/util.go, csi_handler.go at the snapshot in sidecars.md §0)

FINALIZER_ATTACHER_PREFIX: Final = "external-attacher/"
"""On PVs and VAs: `external-attacher/<driver name sanitized>` (`GetFinalizerName`)."""
ANN_VA_NODE_ID: Final = "csi.alpha.kubernetes.io/node-id"
"""On VAs: the CSI node ID the volume was published to (`vaNodeIDAnnotation`)."""

# The `status.attachError`/`detachError` messages are the Go errors' `Error()` texts.
MESSAGE_PV_DELETING: Final = 'PersistentVolume "{volume}" is marked for deletion'
MESSAGE_PV_FINALIZER_FAILED: Final = "could not add PersistentVolume finalizer: {error}"
MESSAGE_VA_SAVE_FAILED: Final = "could not save VolumeAttachment: {error}"
MESSAGE_SECRET_LOAD_FAILED: Final = 'failed to load secret "{namespace}/{name}": {error}'
MESSAGE_CSINODE_WITHOUT_DRIVER: Final = "CSINode {node} does not contain driver {driver}"
MESSAGE_PV_NOT_FOUND: Final = 'persistentvolume "{volume}" not found'
"""A lister's NotFound (client-go `errors.NewNotFound`), as the PV and CSINode lookups fail."""
MESSAGE_CSINODE_NOT_FOUND: Final = 'csinode.storage.k8s.io "{node}" not found'
MESSAGE_SECRET_NOT_FOUND: Final = 'secrets "{name}" not found'
MESSAGE_NON_CSI_SOURCE: Final = "pv spec contained non-csi source that was not migrated"
MESSAGE_BOTH_SOURCES: Final = (
    "both InlineCSIVolumeSource and PersistentVolumeName specified in VA source"
)
MESSAGE_NO_SOURCE: Final = (
    "neither InlineCSIVolumeSource nor PersistentVolumeName specified in VA source"
)
MESSAGE_INLINE_WITHOUT_CSI: Final = "inline volume spec contains nil CSI source"

# --- external-health-monitor controller: events on the PVC ---

HEALTH_EVENT_COMPONENT: Final = "csi-pv-monitor-controller-{driver}"
"""The event source of the health monitor's events (cmd/csi-external-health-monitor-controller)."""
REASON_VOLUME_CONDITION_ABNORMAL: Final = "VolumeConditionAbnormal"
"""Warning on the PVC; the message is the driver's `VolumeCondition.message`."""
REASON_VOLUME_CONDITION_NORMAL: Final = "VolumeConditionNormal"
"""Normal on the PVC when an abnormal volume is healthy again."""
MESSAGE_VOLUME_RECOVERED: Final = "The Volume returns to the healthy state"
"""`util.DefaultRecoveryEventMessage`."""
