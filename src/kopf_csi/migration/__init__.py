"""`kopf-csi migrate`: a CSI driver's controller workload from the Go sidecars to kopf-csi, and
back, as manifest streams (docs/migration.md).

- `stream`: the documents of a YAML stream with their exact texts (the only PyYAML user here);
- `sidecars`: which containers are Go sidecars (by image), their roles and versions;
- `mapping`: pure: the sidecars' Go flags → `kopf-csi run`'s, or refusals naming container and
  flag;
- `rendering`: a workload's sidecars → one kopf-csi container per driver socket;
- `rbac`: the rules kopf-csi needs that the ServiceAccount lacks, as our own roles;
- `transform`: a whole stream, `migrate` and `back`;
- `command`: the command line (`kopf-csi migrate`, `kubectl csi migrate`).

Nothing here talks to a cluster: streams in, streams out.
"""
