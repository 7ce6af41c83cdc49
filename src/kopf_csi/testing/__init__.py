"""Test and sandbox scaffolding: nothing here is part of the operator.

- ``emulator``: an emulated Kubernetes API server over real HTTP (``EmulatedCluster``).
- ``kcm``: a stand-in for the kube-controller-manager controllers around the CSI sidecars.
- ``snapshots``: a stand-in for the snapshot-controller; ``standins``: their common frame.
- ``apimachinery``: the patch, selector and Status-error algorithms the emulator uses.
- ``operator``: kopf in a thread of its own, for tests and the sandbox.
- ``requestlog``: the emulator's requests classified as RBAC sees them (verb, group, resource).

Import the submodules directly; this package imports nothing, so that importing the
operator never pulls in kmock or aiohttp servers.
"""
