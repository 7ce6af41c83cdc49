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

# --- Field managers ---
# The Go sidecars' binary names: client-go's User-Agent starts with them, and the API server
# records them as the field manager of every write (`metadata.managedFields`).

MANAGER_PROVISIONER: Final = "csi-provisioner"
MANAGER_ATTACHER: Final = "csi-attacher"
MANAGER_RESIZER: Final = "csi-resizer"
MANAGER_SNAPSHOTTER: Final = "csi-snapshotter"
MANAGER_HEALTH_MONITOR: Final = "csi-external-health-monitor-controller"

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
MESSAGE_NO_TOPOLOGY: Final = "no available topology found"
"""external-provisioner's error (`topology.go`) for a claim without a selected node when no
CSINode lists the driver with topology keys, or no node carries those keys as labels."""
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

# --- metrics and health endpoints: what dashboards, alerts and probes look for ---
# csi-lib-utils metrics/metrics.go, sig-storage-lib-external-provisioner controller/metrics,
# k8s.io/component-base/metrics/prometheus/workqueue, csi-lib-utils leaderelection.

METRIC_CSI_OPERATIONS: Final = "csi_sidecar_operations_seconds"
"""Histogram of every CSI call: labels driver_name, method_name, grpc_status_code."""
METRIC_DRIVER_UNKNOWN: Final = "unknown-driver"
"""The `driver_name` label before GetPluginInfo answered (`unknownCSIDriverName`)."""
METRIC_PROVISION_TOTAL: Final = "controller_persistentvolumeclaim_provision_total"
METRIC_PROVISION_FAILED: Final = "controller_persistentvolumeclaim_provision_failed_total"
METRIC_PROVISION_DURATION: Final = "controller_persistentvolumeclaim_provision_duration_seconds"
"""Labels `class` (the claim's storageClassName) and `source` (its dataSource kind, or "")."""
METRIC_DELETE_TOTAL: Final = "controller_persistentvolume_delete_total"
METRIC_DELETE_FAILED: Final = "controller_persistentvolume_delete_failed_total"
METRIC_DELETE_DURATION: Final = "controller_persistentvolume_delete_duration_seconds"
"""Label `class` (the PV's storageClassName)."""
METRIC_QUEUE_DEPTH: Final = "workqueue_depth"
METRIC_QUEUE_ADDS: Final = "workqueue_adds_total"
METRIC_QUEUE_LATENCY: Final = "workqueue_queue_duration_seconds"
METRIC_QUEUE_WORK_DURATION: Final = "workqueue_work_duration_seconds"
METRIC_QUEUE_UNFINISHED: Final = "workqueue_unfinished_work_seconds"
METRIC_QUEUE_LONGEST_RUNNING: Final = "workqueue_longest_running_processor_seconds"
METRIC_QUEUE_RETRIES: Final = "workqueue_retries_total"
"""Label `name`: the queue's name (`claims`, `volumes`, ...; see docs/operations.md)."""
METRIC_LEADER_STATUS: Final = "leader_election_master_status"
"""client-go's leader-election gauge: 1 while holding the lease `name`, 0 while waiting."""
METRIC_API_THROTTLED: Final = "kopf_csi_api_throttled_requests"
METRIC_API_THROTTLED_SECONDS: Final = "kopf_csi_api_throttled_seconds"
"""Ours (no Go counterpart), counters (`_total` added): the requests that waited for a role's
client-side rate limit, and the seconds they waited; label `manager`, the role."""
METRIC_API_REQUESTS: Final = "kopf_csi_api_requests"
"""Ours, a counter (`_total` added): every API request the operator's own client sent, by
`manager` (the role), `verb` (the HTTP method), `resource` (`persistentvolumes`,
`persistentvolumeclaims/status`, ...) and `code` (the HTTP status, `<error>` when none came:
client-go's word)."""
METRIC_API_REQUEST_DURATION: Final = "kopf_csi_api_request_duration_seconds"
"""Ours, a histogram with client-go's `rest_client_request_duration_seconds` buckets: from
sending to the whole answer read (a wait for a free connection included, the rate limit's not);
labels `verb`, `resource`."""
METRIC_API_CONNECTION: Final = "kopf_csi_api_connection_seconds"
"""Ours, a histogram: how long each API request took to get a connection (at once when one is
free and open; the pool's wait or a new connection's TCP and TLS otherwise)."""
METRIC_EVENT_LOOP_LAG: Final = "kopf_csi_event_loop_lag_seconds"
"""Ours, a histogram: how late the operator's one thread ran a timer due every 0.1 s (the wait
of anything that became ready at that moment)."""
METRIC_JOURNAL_RECORDS: Final = "kopf_csi_journal_records"
METRIC_JOURNAL_RECORD_WAIT: Final = "kopf_csi_journal_record_wait_seconds"
METRIC_JOURNAL_WRITES: Final = "kopf_csi_journal_writes"
METRIC_API_UNREACHABLE: Final = "kopf_csi_api_unreachable"
METRIC_API_OUTAGES: Final = "kopf_csi_api_outages"
METRIC_API_UNREACHABLE_SECONDS: Final = "kopf_csi_api_unreachable_seconds"
"""Ours, counters (`_total` added), label `journal` (its ConfigMap's base name): the claims
recorded in the in-flight journal before their CreateVolume, the seconds they waited for their
record to be durable, and the journal's writes (one write commits every record waiting)."""
LABEL_DRIVER_NAME: Final = "driver_name"
LABEL_METHOD_NAME: Final = "method_name"
LABEL_GRPC_STATUS_CODE: Final = "grpc_status_code"
LABEL_CLASS: Final = "class"
LABEL_SOURCE: Final = "source"
LABEL_QUEUE_NAME: Final = "name"
LABEL_MANAGER: Final = "manager"  # the field manager, i.e. the sidecar role
LABEL_VERB: Final = "verb"
LABEL_RESOURCE: Final = "resource"
LABEL_CODE: Final = "code"
LABEL_JOURNAL: Final = "journal"
PATH_METRICS: Final = "/metrics"
"""`--metrics-path` default."""
PATH_HEALTHZ: Final = "/healthz"
"""Liveness (ours: the driver's Probe and every registered check; no Go counterpart)."""
PATH_READYZ: Final = "/readyz"
"""Readiness (ours): the driver answered and the caches are primed."""
PATH_LEADER_ELECTION_HEALTHZ: Final = "/healthz/leader-election"
"""csi-lib-utils `HealthCheckerAddress`: 200 "ok", or 500 while the election watchdog fails."""

# --- external-resizer: PVC/PV annotations, conditions, statuses, events ---
# (pkg/util/events.go, util.go, pkg/controller/resize_status.go, expand_and_recover.go,
# pkg/modifycontroller/*.go at the snapshot in sidecars.md §0; k8s.io/api core/v1 enums)

ANN_STORAGE_RESIZER: Final = "volume.kubernetes.io/storage-resizer"
"""On PVCs: the resizer of a migrated in-tree volume (`util.VolumeResizerKey`); re-queues."""
ANN_PRE_RESIZE_CAPACITY: Final = "volume.alpha.kubernetes.io/pre-resize-capacity"
"""On PVs: the claim's capacity before a resize that needs the node (`AnnPreResizeCapacity`)."""
ANN_NODE_EXPANSION_NOT_REQUIRED: Final = "volume.kubernetes.io/node-expansion-not-required"
"""On PVCs: "true" once the controller alone finished the resize; kubelet then skips it."""
RESIZER_EVENT_COMPONENT: Final = "external-resizer {driver}"
"""The event source of the resizer's and the modify controller's events."""

CONDITION_RESIZING: Final = "Resizing"
CONDITION_FS_RESIZE_PENDING: Final = "FileSystemResizePending"
CONDITION_CONTROLLER_RESIZE_ERROR: Final = "ControllerResizeError"
CONDITION_NODE_RESIZE_ERROR: Final = "NodeResizeError"
CONDITION_MODIFYING_VOLUME: Final = "ModifyingVolume"
CONDITION_MODIFY_VOLUME_ERROR: Final = "ModifyVolumeError"

RESIZE_CONTROLLER_IN_PROGRESS: Final = "ControllerResizeInProgress"
RESIZE_CONTROLLER_INFEASIBLE: Final = "ControllerResizeInfeasible"
RESIZE_NODE_PENDING: Final = "NodeResizePending"
RESIZE_NODE_IN_PROGRESS: Final = "NodeResizeInProgress"
RESIZE_NODE_INFEASIBLE: Final = "NodeResizeInfeasible"
"""`status.allocatedResourceStatuses.storage` values (ClaimResourceStatus)."""
MODIFY_PENDING: Final = "Pending"
MODIFY_IN_PROGRESS: Final = "InProgress"
MODIFY_INFEASIBLE: Final = "Infeasible"
"""`status.modifyVolumeStatus.status` values (PersistentVolumeClaimModifyVolumeStatus)."""

REASON_RESIZING: Final = "Resizing"
REASON_VOLUME_RESIZE_FAILED: Final = "VolumeResizeFailed"
REASON_VOLUME_RESIZE_SUCCESSFUL: Final = "VolumeResizeSuccessful"
REASON_FS_RESIZE_REQUIRED: Final = "FileSystemResizeRequired"
REASON_VOLUME_MODIFY: Final = "VolumeModify"
REASON_VOLUME_MODIFY_SUCCESSFUL: Final = "VolumeModifySuccessful"
REASON_VOLUME_MODIFY_FAILED: Final = "VolumeModifyFailed"

MESSAGE_RESIZING: Final = "External resizer is resizing volume {volume}"
MESSAGE_FS_RESIZE_REQUIRED: Final = "Require file system resize of volume on node"
MESSAGE_RESIZE_SUCCEEDED: Final = "Resize volume succeeded"
MESSAGE_RESIZE_FAILED: Final = 'resize volume "{volume}" by resizer "{driver}" failed: {error}'
"""Warning `VolumeResizeFailed` (and the error) when ControllerExpandVolume fails."""
MESSAGE_OFFLINE_IN_USE: Final = (
    "Unable to expand {claim} because CSI driver {driver} only supports offline expansion and"
    " volume is currently in-use"
)
"""Warning `VolumeResizeFailed` while a volume that failed with FailedPrecondition is in use."""
MESSAGE_FS_RESIZE_PENDING: Final = (
    "Waiting for user to (re-)start a pod to finish file system resize of volume on node."
)
"""The `FileSystemResizePending` condition's message."""
MESSAGE_CONTROLLER_RESIZE_ERROR: Final = "failed to expand pvc with {error}"
"""The `ControllerResizeError` condition's message."""
MESSAGE_RESIZE_SLOW_RETRY: Final = (
    "skipping volume expansion for pvc {claim}, because expansion previously failed with"
    " infeasible error"
)
MESSAGE_MODIFYING: Final = "external resizer is modifying volume {claim} with vac {vac}"
MESSAGE_MODIFIED: Final = "external resizer modified volume {claim} with vac {vac} successfully"
MESSAGE_VAC_NOT_FOUND: Final = 'VAC "{vac}" does not exist.'
MESSAGE_MODIFY_IN_PROGRESS: Final = "ModifyVolume operation in progress."
"""The `ModifyingVolume` condition's message."""
MESSAGE_MODIFY_ERROR: Final = "ModifyVolume failed with error: {error}. Waiting for retry."
"""The `ModifyVolumeError` condition's message."""
MESSAGE_STILL_MODIFYING: Final = "{error}. Still modifying to VAC {vac}"
"""Warning `VolumeModifyFailed` after a non-final error: the operation may still be running."""
MESSAGE_MODIFY_SLOW_RETRY: Final = (
    "skipping volume modification for pvc {claim}, because modification previously failed with"
    " infeasible error"
)

MESSAGE_RESIZE_SECRET_FAILED: Final = (
    "error getting secret {name} in namespace {namespace}: {error}"
)
"""The resize error when the controller-expand secret cannot be read (`getCredentials`)."""


# --- csi-snapshotter (the per-driver sidecar of external-snapshotter) ---
# (pkg/utils/util.go, pkg/sidecar-controller/snapshot_controller.go, csi_handler.go,
# pkg/snapshotter/snapshotter.go at the snapshot in sidecars.md §0)

ANN_SNAPSHOT_BEING_CREATED: Final = "snapshot.storage.kubernetes.io/volumesnapshot-being-created"
"""On VSCs, value `yes`: CreateSnapshot was sent and has not answered with success or a final
error. While it is there, the content is never released (no leaked snapshot after a timeout)."""
ANN_SNAPSHOT_BEING_DELETED: Final = "snapshot.storage.kubernetes.io/volumesnapshot-being-deleted"
"""On VSCs, set by the snapshot-controller once the VolumeSnapshot is being deleted."""
ANN_SNAPSHOT_DELETION_SECRET_NAME: Final = "snapshot.storage.kubernetes.io/deletion-secret-name"
ANN_SNAPSHOT_DELETION_SECRET_NAMESPACE: Final = (
    "snapshot.storage.kubernetes.io/deletion-secret-namespace"
)
"""On VSCs, set by the snapshot-controller: the secret of CreateSnapshot and DeleteSnapshot."""
ANN_SNAPSHOT_DEFAULT_CLASS: Final = "snapshot.storage.kubernetes.io/is-default-class"
"""On VolumeSnapshotClasses: the default class of its driver (the snapshot-controller's)."""
FINALIZER_SNAPSHOT_CONTENT_BOUND: Final = (
    "snapshot.storage.kubernetes.io/volumesnapshotcontent-bound-protection"
)
"""On VSCs: added by the snapshot-controller, removed by the sidecar once the snapshot is
deleted on the driver (policy Delete) or released (policy Retain)."""
FINALIZER_SNAPSHOT_BOUND: Final = "snapshot.storage.kubernetes.io/volumesnapshot-bound-protection"
FINALIZER_SNAPSHOT_AS_SOURCE: Final = (
    "snapshot.storage.kubernetes.io/volumesnapshot-as-source-protection"
)
"""On VolumeSnapshots: the snapshot-controller's two finalizers (its stand-in adds them)."""
SNAPSHOT_CONTENT_NAME_PREFIX: Final = "snapcontent-"
"""The snapshot-controller's name of a dynamic VSC: `snapcontent-<VolumeSnapshot uid>`."""
DEFAULT_SNAPSHOT_NAME_PREFIX: Final = "snapshot"
"""`--snapshot-name-prefix`: CreateSnapshot's name is `<prefix>-<VolumeSnapshot uid>`."""
SNAPSHOTTER_EVENT_COMPONENT: Final = "csi-snapshotter {driver}"
"""The event source of the sidecar's events (NewCSISnapshotSideCarController)."""

PARAM_SNAPSHOTTER_SECRET_NAME: Final = "csi.storage.k8s.io/snapshotter-secret-name"
PARAM_SNAPSHOTTER_SECRET_NAMESPACE: Final = "csi.storage.k8s.io/snapshotter-secret-namespace"
PARAM_SNAPSHOTTER_LIST_SECRET_NAME: Final = "csi.storage.k8s.io/snapshotter-list-secret-name"
PARAM_SNAPSHOTTER_LIST_SECRET_NAMESPACE: Final = (
    "csi.storage.k8s.io/snapshotter-list-secret-namespace"
)
PARAM_GROUP_SNAPSHOTTER_SECRET_NAME: Final = "csi.storage.k8s.io/group-snapshotter-secret-name"
PARAM_GROUP_SNAPSHOTTER_SECRET_NAMESPACE: Final = (
    "csi.storage.k8s.io/group-snapshotter-secret-namespace"
)
"""The only `csi.storage.k8s.io/` keys a VolumeSnapshotClass may have (stripped, never sent)."""
PARAM_VOLUME_SNAPSHOT_NAME: Final = "csi.storage.k8s.io/volumesnapshot/name"
PARAM_VOLUME_SNAPSHOT_NAMESPACE: Final = "csi.storage.k8s.io/volumesnapshot/namespace"
PARAM_VOLUME_SNAPSHOT_CONTENT_NAME: Final = "csi.storage.k8s.io/volumesnapshotcontent/name"
"""Added to the CreateSnapshot parameters by `--extra-create-metadata`."""

REASON_SNAPSHOT_CREATION_FAILED: Final = "SnapshotCreationFailed"
REASON_SNAPSHOT_CHECK_FAILED: Final = "SnapshotContentCheckandUpdateFailed"
REASON_SNAPSHOT_DELETE_ERROR: Final = "SnapshotDeleteError"
MESSAGE_SNAPSHOT_CREATION_FAILED: Final = "Failed to create snapshot: {error}"
MESSAGE_SNAPSHOT_CHECK_FAILED: Final = "Failed to check and update snapshot content: {error}"
MESSAGE_SNAPSHOT_CREDENTIALS_FAILED: Final = "Failed to get snapshot credentials"
MESSAGE_SNAPSHOT_DELETE_FAILED: Final = "Failed to delete snapshot"
MESSAGE_SNAPSHOT_CLEAR_STATUS_FAILED: Final = "Failed to clear content status"

# The errors inside those messages and in `status.error.message` (Go `fmt.Errorf` texts; a
# `{quoted}` field is Go's `%q`/`%#v` of its value, rendered by `provisioning.gofmt.go_quote`).
ERROR_SNAPSHOT_INPUT: Final = (
    "failed to get input parameters to create snapshot for content {content}: {quoted}"
)
ERROR_SNAPSHOT_WITHOUT_CLASS: Final = "failed to take snapshot {content} without a snapshot class"
ERROR_SNAPSHOT_CLASS_NOT_FOUND: Final = (
    'volumesnapshotclass.snapshot.storage.k8s.io "{name}" not found'
)
ERROR_SNAPSHOT_SECRET_UNSPECIFIED: Final = (
    "cannot retrieve secrets for snapshot content {quoted}, err: secret name or namespace not"
    " specified"
)
ERROR_SNAPSHOT_CREDENTIALS: Final = "cannot get credentials for snapshot content {quoted}"
ERROR_SNAPSHOT_SET_BEING_CREATED: Final = (
    "failed to add VolumeSnapshotBeingCreated annotation on the content {content}: {quoted}"
)
ERROR_SNAPSHOT_CONTROLLER_UPDATE: Final = (
    "snapshot controller failed to update {content} on API server: {error}"
)
ERROR_SNAPSHOT_PREFIXED_PARAMETERS: Final = (
    "failed to remove CSI Parameters of prefixed keys: {error}"
)
ERROR_SNAPSHOT_UNKNOWN_PARAMETER: Final = (
    'found unknown parameter key "{key}" with reserved namespace csi.storage.k8s.io/'
)
ERROR_SNAPSHOT_NOT_BOUND: Final = (
    "cannot create snapshot. Snapshot content {content} not bound to a snapshot"
)
ERROR_SNAPSHOT_TAKE: Final = "failed to take snapshot of the volume {volume}: {quoted}"
ERROR_SNAPSHOT_REMOVE_BEING_CREATED_FINAL: Final = (
    "failed to remove VolumeSnapshotBeingCreated annotation from the content {content}: {error}"
)
ERROR_SNAPSHOT_REMOVE_BEING_CREATED: Final = (
    "failed to remove VolumeSnapshotBeingCreated annotation on the content {content}: {quoted}"
)
ERROR_SNAPSHOT_UPDATE_STATUS: Final = (
    "error updating status for volume snapshot content {content}: {error}"
)
ERROR_SNAPSHOT_GET_CONTENT: Final = "error get snapshot content {content} from api server: {error}"
ERROR_SNAPSHOT_GET_CLASS: Final = (
    "failed to get snapshot class {name} for snapshot content {content}: {error}"
)
ERROR_SNAPSHOT_SECRET_REFERENCE: Final = (
    "failed to get secret reference for snapshot content {content}: {error}"
)
ERROR_SNAPSHOT_GET_CREDENTIALS: Final = (
    "failed to get credentials for snapshot content {content}: {error}"
)
ERROR_SNAPSHOT_MEMBER_CREDENTIALS: Final = (
    "failed to get credentials from annotation for snapshot content {content}: {error}"
)
ERROR_SNAPSHOT_GET_SECRET: Final = "error getting secret {name} in namespace {namespace}: {error}"
ERROR_SNAPSHOT_LIST: Final = "failed to list snapshot for content {content}: {quoted}"
ERROR_SNAPSHOT_LIST_NO_HANDLE: Final = (
    "failed to list snapshot for content {content}: snapshotHandle is missing"
)
ERROR_SNAPSHOT_LIST_SUPPORTED: Final = "failed to check if ListSnapshots is supported: {error}"
ERROR_SNAPSHOT_NOT_FOUND: Final = "can not find snapshot for snapshotID {snapshot_id}"
ERROR_SNAPSHOT_DELETE: Final = "failed to delete snapshot content {content}: {quoted}"
ERROR_SNAPSHOT_DELETE_NO_HANDLE: Final = (
    "failed to delete snapshot content {content}: snapshotHandle is missing"
)
# GetSecretReference's errors (the VolumeSnapshotClass's secret templates).
ERROR_SNAPSHOT_SECRET_TEMPLATES: Final = (
    "failed to get name and namespace template from params: {error}"
)
ERROR_SNAPSHOT_SECRET_HALF: Final = (
    "either name and namespace for {kind} secrets specified, Both must be specified"
)
ERROR_SNAPSHOT_SECRET_EMPTY: Final = (
    "{kind} secrets specified in parameters but value of either namespace or name is empty"
)
ERROR_SNAPSHOT_SECRET_RESOLVE: Final = "error resolving value {quoted}: {error}"
ERROR_SNAPSHOT_NAMESPACE_RESOLVED_INVALID: Final = (
    "{quoted} resolved to {resolved} which is not a valid namespace name"
)
ERROR_SNAPSHOT_NAMESPACE_INVALID: Final = "{quoted} is not a valid namespace name"
ERROR_SNAPSHOT_NAME_RESOLVED_INVALID: Final = (
    "{quoted} resolved to {resolved} which is not a valid secret name"
)
ERROR_SNAPSHOT_NAME_INVALID: Final = "{quoted} is not a valid secret name"

# --- csi-snapshotter's group snapshot controller (groupsnapshot.storage.k8s.io/v1) ---
# (pkg/utils/util.go, pkg/sidecar-controller/groupsnapshot_helper.go, csi_handler.go,
# pkg/group_snapshotter/group_snapshotter.go, cmd/csi-snapshotter/main.go at the snapshot in
# sidecars.md §0)

KIND_VOLUME_GROUP_SNAPSHOT: Final = "VolumeGroupSnapshot"
ANN_GROUP_SNAPSHOT_BEING_CREATED: Final = (
    "groupsnapshot.storage.kubernetes.io/volumegroupsnapshot-being-created"
)
"""On VGSCs, ours: saved before CreateVolumeGroupSnapshot, removed after its success or a final
error; while it is there, a deleted group content is never released."""
ANN_GROUP_SNAPSHOT_BEING_DELETED: Final = (
    "groupsnapshot.storage.kubernetes.io/volumegroupsnapshot-being-deleted"
)
"""On VGSCs, set by the snapshot-controller once the VolumeGroupSnapshot is being deleted."""
ANN_GROUP_SNAPSHOT_DELETION_SECRET_NAME: Final = (
    "groupsnapshot.storage.kubernetes.io/deletion-secret-name"
)
ANN_GROUP_SNAPSHOT_DELETION_SECRET_NAMESPACE: Final = (
    "groupsnapshot.storage.kubernetes.io/deletion-secret-namespace"
)
"""On VGSCs, set by the snapshot-controller: the secret of the create and delete calls."""
ANN_GROUP_SNAPSHOT_DEFAULT_CLASS: Final = "groupsnapshot.storage.kubernetes.io/is-default-class"
ANN_GROUP_SNAPSHOT_HANDLE: Final = "groupsnapshot.storage.k8s.io/volumeGroupSnapshotHandle"
"""On the VSC of each member of a group, set by the snapshot-controller (the group's handle):
the member's content is the snapshot-controller's, never created or written by the sidecar."""
FINALIZER_GROUP_SNAPSHOT_CONTENT_BOUND: Final = (
    "groupsnapshot.storage.kubernetes.io/volumegroupsnapshotcontent-bound-protection"
)
"""On VGSCs: added by the snapshot-controller, removed by the sidecar once the group snapshot
is deleted on the driver (or retained)."""
FINALIZER_GROUP_SNAPSHOT_BOUND: Final = (
    "groupsnapshot.storage.kubernetes.io/volumegroupsnapshot-bound-protection"
)
FINALIZER_SNAPSHOT_IN_GROUP: Final = (
    "snapshot.storage.kubernetes.io/volumesnapshot-in-group-protection"
)
"""On VolumeGroupSnapshots and member VolumeSnapshots: the snapshot-controller's (the stand-in
adds them)."""
LABEL_GROUP_SNAPSHOT_NAME: Final = "groupsnapshot.storage.k8s.io/volumeGroupSnapshotName"
"""On member VolumeSnapshots: the name of their VolumeGroupSnapshot (the snapshot-controller's)."""
GROUP_SNAPSHOT_CONTENT_NAME_PREFIX: Final = "groupsnapcontent-"
"""The snapshot-controller's name of a dynamic VGSC: `groupsnapcontent-<VolumeGroupSnapshot
uid>`."""
DEFAULT_GROUP_SNAPSHOT_NAME_PREFIX: Final = "groupsnapshot"
"""`--groupsnapshot-name-prefix`: the group's CSI name is `<prefix>-<VolumeGroupSnapshot uid>`."""
PARAM_VOLUME_GROUP_SNAPSHOT_NAME: Final = "csi.storage.k8s.io/volumegroupsnapshot/name"
PARAM_VOLUME_GROUP_SNAPSHOT_NAMESPACE: Final = "csi.storage.k8s.io/volumegroupsnapshot/namespace"
PARAM_VOLUME_GROUP_SNAPSHOT_CONTENT_NAME: Final = (
    "csi.storage.k8s.io/volumegroupsnapshotcontent/name"
)
"""Added to the CreateVolumeGroupSnapshot parameters by `--extra-create-metadata`."""

REASON_GROUP_SNAPSHOT_CREATION_FAILED: Final = "GroupSnapshotCreationFailed"
REASON_GROUP_SNAPSHOT_CHECK_FAILED: Final = "GroupSnapshotContentCheckandUpdateFailed"
REASON_GROUP_SNAPSHOT_DELETE_ERROR: Final = "GroupSnapshotDeleteError"
MESSAGE_GROUP_SNAPSHOT_CREATION_FAILED: Final = "Failed to create group snapshot: {error}"
MESSAGE_GROUP_SNAPSHOT_CHECK_FAILED: Final = (
    "Failed to check and update group snapshot content: {error}"
)
MESSAGE_GROUP_SNAPSHOT_CREDENTIALS_FAILED: Final = "Failed to get snapshot credentials"
MESSAGE_GROUP_SNAPSHOT_DELETE_FAILED: Final = "Failed to delete group snapshot"
MESSAGE_GROUP_SNAPSHOT_CLEAR_STATUS_FAILED: Final = "Failed to clear content status"

ERROR_GROUP_SNAPSHOT_INPUT: Final = (
    "failed to get input parameters to create group snapshot for group snapshot content"
    " {content}: {quoted}"
)
ERROR_GROUP_SNAPSHOT_WITHOUT_CLASS: Final = (
    "failed to take group snapshot {content} without a group snapshot class"
)
ERROR_GROUP_SNAPSHOT_CLASS_NOT_FOUND: Final = (
    'volumegroupsnapshotclass.groupsnapshot.storage.k8s.io "{name}" not found'
)
ERROR_GROUP_SNAPSHOT_SECRET_UNSPECIFIED: Final = (
    "cannot retrieve secrets for group snapshot content {quoted}, err: secret name or namespace"
    " not specified"
)
ERROR_GROUP_SNAPSHOT_CREDENTIALS: Final = (
    "cannot get credentials for group snapshot content {quoted}"
)
ERROR_GROUP_SNAPSHOT_SET_BEING_CREATED: Final = (
    "failed to add VolumeGroupSnapshotBeingCreated annotation on the group snapshot content"
    " {content}: {quoted}"
)
ERROR_GROUP_SNAPSHOT_REMOVE_BEING_CREATED_FINAL: Final = (
    "failed to remove VolumeGroupSnapshotBeingCreated annotation from the group snapshot content"
    " {content}: {error}"
)
ERROR_GROUP_SNAPSHOT_REMOVE_BEING_CREATED: Final = (
    "failed to remove VolumeGroupSnapshotBeingCreated annotation on the groupSnapshotContent"
    " {content}: {quoted}"
)
ERROR_GROUP_SNAPSHOT_NOT_BOUND: Final = (
    "cannot create group snapshot. Group snapshot content {content} not bound to a group snapshot"
)
ERROR_GROUP_SNAPSHOT_TAKE: Final = (
    "failed to take group snapshot of the volumes {volumes}: {quoted}"
)
ERROR_GROUP_SNAPSHOT_UPDATE_STATUS: Final = (
    "error updating status for volume group snapshot content {content}: {error}"
)
ERROR_GROUP_SNAPSHOT_GET_CONTENT: Final = (
    "error get group snapshot content {content} from api server: {error}"
)
ERROR_GROUP_SNAPSHOT_GET_CLASS: Final = (
    "failed to get group snapshot class {name} for group snapshot content {content}: {error}"
)
ERROR_GROUP_SNAPSHOT_SECRET_REFERENCE: Final = (
    "failed to get secret reference for group snapshot content {content}: {error}"
)
ERROR_GROUP_SNAPSHOT_GET_CREDENTIALS: Final = (
    "failed to get credentials for group snapshot content {content}: {error}"
)
ERROR_GROUP_SNAPSHOT_NO_VOLUMES: Final = (
    "cannot create group snapshot. PVCs to be snapshotted not found in group snapshot content"
    " {content}"
)
ERROR_GROUP_SNAPSHOT_STATUS: Final = (
    "failed to list group snapshot for group snapshot content {content}: {quoted}"
)
ERROR_GROUP_SNAPSHOT_STATUS_NO_IDS: Final = (
    "cannot list group snapshot {content}. No snapshots found in the group snapshot content"
)
ERROR_GROUP_SNAPSHOT_STATUS_NO_HANDLE: Final = (
    "failed to list group snapshot for group snapshot content {content}: groupSnapshotHandle is"
    " missing"
)
ERROR_GROUP_SNAPSHOT_DELETE: Final = "failed to delete group snapshot {quoted}, err: {error}"
ERROR_GROUP_SNAPSHOT_DELETE_NO_IDS: Final = (
    "cannot delete group snapshot content {content}. No snapshots found in the group snapshot"
)
ERROR_GROUP_SNAPSHOT_DELETE_NO_HANDLE: Final = (
    "failed to delete group snapshot content {content}: groupsnapshotHandle is missing"
)

# --- leader election: the Go sidecars' Lease names (coordination.k8s.io/v1, `--leader-election`)
# external-provisioner cmd/csi-provisioner (the driver name, `/` → `-`), external-attacher
# cmd/csi-attacher/main.go, external-resizer cmd/csi-resizer/main.go, external-snapshotter
# cmd/csi-snapshotter/main.go, external-health-monitor cmd/csi-external-health-monitor-
# controller; every one passes through csi-lib-utils leaderelection `sanitizeName`.
LEASE_PREFIX_PROVISIONER: Final = ""
"""external-provisioner's Lease is the bare (sanitized) driver name: `hostpath-csi-k8s-io`."""
LEASE_PREFIX_ATTACHER: Final = "external-attacher-leader-"
LEASE_PREFIX_RESIZER: Final = "external-resizer-"
LEASE_PREFIX_SNAPSHOTTER: Final = "external-snapshotter-leader-"
LEASE_PREFIX_HEALTH_MONITOR: Final = "external-health-monitor-leader-"
LEASE_EVENT_REASON: Final = "LeaderElection"
"""client-go LeaseLock `RecordEvent`: a Normal event on the Lease, "<identity> became leader"."""
LEASE_EVENT_BECAME_LEADER: Final = "{identity} became leader"
LEASE_EVENT_STOPPED_LEADING: Final = "{identity} stopped leading"
LEASE_EVENT_COMPONENT: Final = "{lease}/{identity}"
"""csi-lib-utils: the events' source component is `<lock name>/<identity>`."""


def sanitize_lease_name(name: str) -> str:
    """csi-lib-utils `sanitizeName`: every char outside `[a-zA-Z0-9-]` → `-`, no trailing `-`.

    Applied to the Lease name and to the holder identity, as csi-lib-utils does.
    """
    safe = "".join(c if (c.isascii() and c.isalnum()) or c == "-" else "-" for c in name)
    return safe + "X" if safe.endswith("-") else safe


def lease_name(prefix: str, driver_name: str) -> str:
    """The Lease one Go sidecar holds for `driver_name`: `prefix` + the driver, sanitized."""
    return sanitize_lease_name(prefix + driver_name.replace("/", "-"))


# --- (end of leader election) ---
