"""The provisioner's decisions, as pure functions: no I/O, no kopf, no Kubernetes client.

A port of what external-provisioner v6 and sig-storage-lib-external-provisioner v13 decide,
with their exact strings (see `kopf_csi.names`). Kubernetes objects are plain dicts as kopf's
`body` gives them; CSI messages are `kopf_csi.csi.messages`. The async orchestration (reads,
writes, CSI calls, events) and the kopf handlers build on these; nothing here knows of them.

- `decisions`: should we provision this claim; the selected node; event messages.
- `naming`: the PV/volume name, the provisioner identity, a claim's StorageClass name.
- `requests`: the CreateVolumeRequest, in two pure steps around the reads.
- `parameters`, `secrets`, `capabilities`, `topology`, `sources`: its parts
  (`templates` and `terms` are the secrets' and the topology's helpers).
- `volumes`: checking CreateVolume's answer, and the PV to create.
- `deletions`: which PVs are ours, our PV finalizer, DeleteVolume.
- `protection`: the finalizers on clone and snapshot sources.
- `states`, `errors`: what a failure means (the gRPC table), and the errors raised.
- `backoff`, `options`, `quantities`, `gofmt`: retry delays, settings, sizes, Go's formatting.
- `backends`: the provisioner back-end interface (public API: `ProvisionerBackend`,
  `ProvisionOptions`, `ProvisionResult`, `register_provisioner`), for storage without a CSI
  driver; `volumes.complete_volume` makes a back end's answer a whole PV.

The I/O lives beside them: `operations` (the controller), `csi_backend` (the CSI driver as a
back end), `reclaiming`, `sourcing`, `journal`, `access`, `hookcalls` (running the users'
CreateVolume hooks; `hooks`, pure, is their public interface).
"""
