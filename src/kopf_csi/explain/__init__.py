"""`kopf-csi explain`: why a claim, volume, attachment or snapshot is stuck, and what to do next.

- `target`: `KIND/[NAMESPACE/]NAME` with kubectl's kind names;
- `reading`: the objects the target's chain depends on, read-only, through `kopf_csi.kube`, and
  the operator's debug endpoint (`--operator`);
- `rules`: the diagnosis, a pure function over what was read (`Observed` → `Diagnosis`);
- `rendering`: text and JSON;
- `introspection`: the operator's side, what `/debug/objects/...` serves (read-only);
- `command`: the command line (`kopf-csi explain`, `kubectl-csi explain`).
"""
