"""Example provisioner without a CSI driver: a directory on the node for each claim.

Rancher's local-path-provisioner in a page. Each claim gets `<basePath>/<PV name>` on its node,
as a `local` PV (or `hostPath`, with `volumeType: hostPath`) pinned to that node by its node
affinity. The directory is removed when a Delete-policy PV is released, and kept on Retain.
A node without room for the request gives the claim back to the scheduler (a reschedule); an
unknown parameter is a final error, with its `ProvisioningFailed` event.

Run one per node, where the directories are, without a CSI driver:

    kopf-csi run --no-csi --node-deployment --node-name=$(NODE_NAME) \\
        -m kopf_csi_handlers.examples.hostdir_provisioner

with StorageClasses of `provisioner: kopf-csi.kopf.dev/hostdir`. Everything else (which claims,
the PV name, events, retries, the journal, leader election) is the operator's; see the README's
"Writing a provisioner" and the tests in `tests/examples/test_hostdir_provisioner.py`.
"""

from __future__ import annotations

import asyncio
import pathlib
import shutil
import socket
from collections.abc import Mapping
from typing import Any

import kopf

from kopf_csi import api

NAME = "kopf-csi.kopf.dev/hostdir"
BASE_PATH = "/var/lib/kopf-csi-hostdir"
VOLUME_TYPES = ("local", "hostPath")
HOSTNAME_LABEL = "kubernetes.io/hostname"


def parse_parameters(parameters: Mapping[str, str]) -> tuple[pathlib.Path, str]:
    """The class's `basePath` and `volumeType`; ValueError names a bad one (the pure part)."""
    unknown = sorted(set(parameters) - {"basePath", "volumeType"})
    if unknown:
        raise ValueError(f"invalid parameter {unknown[0]!r}: only basePath and volumeType")
    volume_type = parameters.get("volumeType", "local")
    if volume_type not in VOLUME_TYPES:
        raise ValueError(f"invalid volumeType {volume_type!r}: local or hostPath")
    base = pathlib.Path(parameters.get("basePath", BASE_PATH))
    if not base.is_absolute():
        raise ValueError(f"invalid basePath {str(base)!r}: not an absolute path")
    return base, volume_type


def node_affinity(hostname: str) -> dict[str, Any]:
    term = {"matchExpressions": [{"key": HOSTNAME_LABEL, "operator": "In", "values": [hostname]}]}
    return {"required": {"nodeSelectorTerms": [term]}}


class HostDirProvisioner:
    """Directories under a base path on this node (`node_name`)."""

    def __init__(self, *, node_name: str) -> None:
        self.node_name = node_name

    async def provision(self, options: api.ProvisionOptions) -> api.ProvisionResult:
        try:
            base, volume_type = parse_parameters(options.parameters)
        except ValueError as exc:
            return api.ProvisionResult.failed(str(exc))  # final: a retry cannot fix the class
        node = options.selected_node_name or self.node_name  # Immediate: this node
        if node != self.node_name:
            raise api.IgnoredError(f"the claim is for node {node}, not {self.node_name}")
        requested = options.requested_bytes
        free = await asyncio.to_thread(_free_bytes, base)
        if requested > free:
            return api.ProvisionResult.reschedule(
                f"node {node} has {free} bytes free in {base}, the claim asks for {requested}"
            )
        path = base / options.volume_name  # the same on every retry: made once
        await asyncio.to_thread(path.mkdir, parents=True, exist_ok=True)
        labels = (options.selected_node or {}).get("metadata", {}).get("labels") or {}
        source = {"path": str(path)}
        if volume_type == "hostPath":
            source["type"] = "Directory"
        return api.ProvisionResult.volume_source(
            {volume_type: source},
            node_affinity=node_affinity(labels.get(HOSTNAME_LABEL, node)),
        )

    async def delete(self, volume: Mapping[str, Any]) -> None:
        spec = volume.get("spec", {})
        source = spec.get("local") or spec.get("hostPath") or {}
        path = pathlib.Path(source.get("path", "/"))
        if path.name != volume["metadata"]["name"]:
            raise api.IgnoredError(f"{path} is not a directory of ours")
        terms = (spec.get("nodeAffinity") or {}).get("required", {}).get("nodeSelectorTerms", [])
        hosts = {v for t in terms for e in t.get("matchExpressions", []) for v in e["values"]}
        if hosts and self.node_name not in hosts:
            raise api.IgnoredError(f"the volume is on {sorted(hosts)}, not on {self.node_name}")
        await asyncio.to_thread(_remove, path)


def _free_bytes(base: pathlib.Path) -> int:
    base.mkdir(parents=True, exist_ok=True)
    return shutil.disk_usage(base).free


def _remove(path: pathlib.Path) -> None:
    if path.exists():  # else removed before (a retry after a lost PV write): done
        shutil.rmtree(path)


@kopf.on.startup(id="examples.hostdir_provisioner")
async def register(memo: kopf.Memo, **_: Any) -> None:
    node = api.settings_from_memo(memo).provisioner.node_name or socket.gethostname()
    api.register_provisioner(memo, name=NAME, provisioner=HostDirProvisioner(node_name=node))
