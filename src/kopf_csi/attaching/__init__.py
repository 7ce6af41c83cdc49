"""external-attacher and external-health-monitor's controller: decisions, requests, operations.

A port of what external-attacher v4 and the health monitor's controller do, with their exact
strings (`kopf_csi.names`). Kubernetes objects are plain dicts; CSI messages are
`kopf_csi.csi.messages`. No kopf here: `handlers/attacher.py` and `handlers/health.py` adapt
kopf's calls to these.

- `decisions`: pure. Which VAs are ours, the finalizer, the node ID, the status patches, the
  "only the error changed" filter, which VAs the reconciler re-syncs.
- `requests`: pure. ControllerPublish/UnpublishVolumeRequest from a VA and its PV.
- `errors`: `AttachError` and the Go `err.Error()` text and gRPC code of a failure.
- `operations`: async. `Attacher`: attach, detach, the PV finalizer, trivial mode, reconcile.
- `conditions`: pure. When the health monitor posts events, and which.
- `monitor`: async. `HealthMonitor`: read volume conditions, post the events.
- `options`: the settings of both, named after the Go flags, with their defaults.

Only `requests` borrows from the provisioner (`provisioning.capabilities`: the access-mode
mapping is csi-lib-utils' and shared by every sidecar).
"""
