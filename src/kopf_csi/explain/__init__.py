"""`kopf-csi explain`: why a claim, volume, attachment or snapshot is stuck, and what to do next.

- `reading`: the objects the target's chain depends on, read-only, through `kopf_csi.kube`, and
  the operator's debug endpoint (`--operator`);
- `rules`: the diagnosis, a pure function over what was read (`Observed` → `Diagnosis`);
- `rendering`: text and JSON;
- `command`: the command line (`kopf-csi explain`, `kubectl-csi explain`).

Shared with the operator, and so below it in the layers: `kopf_csi.targets` (`KIND/[NAMESPACE/]NAME`
with kubectl's kind names) and `kopf_csi.introspection` (what `/debug/objects/...` serves).
"""
