"""The sandbox: kopf-csi working on a laptop with no cluster and no Docker.

It starts the emulated Kubernetes API (with the stand-ins for kube-controller-manager, the
scheduler and the snapshot-controller), the reference CSI driver and the operator, checks that
each one answers, applies the example manifests, and shows live what happens to each claim.
`python -m kopf_csi.sandbox --help`.
"""
