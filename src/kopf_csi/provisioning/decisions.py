"""Whether to provision for a claim at all, and the checks the library makes before it starts.

This is the claim side of sig-storage-lib-external-provisioner (`shouldProvision`, the head of
`provisionClaimOperation`) combined with external-provisioner's `ShouldProvision`: the claim is
unbound, annotated for our driver (or migrated to it), has a selected node if its class waits
for the first consumer, has no PV yet, and its class is ours. Each answer carries a reason for
the logs. Node-deployment mode (`--node-deployment`) is not covered here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from typing import Any

from kopf_csi import names
from kopf_csi.provisioning import gofmt
from kopf_csi.provisioning.errors import ProvisioningError
from kopf_csi.provisioning.naming import claim_class_name
from kopf_csi.provisioning.states import ProvisioningState

__all__ = [
    "Decision",
    "claim_key",
    "may_reschedule",
    "missing_node_error",
    "node_lookup_error",
    "provisioner_annotation",
    "provisioning_message",
    "selected_node",
    "should_provision",
    "succeeded_message",
]

WAIT_FOR_FIRST_CONSUMER = "WaitForFirstConsumer"


@dataclasses.dataclass(frozen=True)
class Decision:
    """Yes or no, and why (for the logs; never shown to users)."""

    should: bool
    reason: str

    def __bool__(self) -> bool:
        return self.should


def _annotations(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return obj.get("metadata", {}).get("annotations") or {}


def provisioner_annotation(claim: Mapping[str, Any]) -> str | None:
    """`volume.kubernetes.io/storage-provisioner`, else the beta key (present, even if "")."""
    annotations = _annotations(claim)
    for key in (names.ANN_STORAGE_PROVISIONER, names.ANN_BETA_STORAGE_PROVISIONER):
        if key in annotations:
            return annotations[key]
    return None


def selected_node(claim: Mapping[str, Any]) -> str | None:
    """`volume.kubernetes.io/selected-node`, else the alpha key (present, even if "")."""
    annotations = _annotations(claim)
    for key in (names.ANN_SELECTED_NODE, names.ANN_ALPHA_SELECTED_NODE):
        if key in annotations:
            return annotations[key]
    return None


def should_provision(
    claim: Mapping[str, Any],
    storage_class: Mapping[str, Any] | None,
    *,
    driver_name: str,
    known_names: Collection[str] = (),
    volume_exists: bool = False,
) -> Decision:
    """Whether to start (or continue) provisioning the claim.

    `known_names` are extra provisioner names we answer to (the in-tree name of a migrated
    plugin); `volume_exists` says whether a PV named for the claim exists already. A missing
    StorageClass is an error to retry (`NO_CHANGE`), not a "no": it may be created later.
    """
    volume_name = claim.get("spec", {}).get("volumeName")
    if volume_name:
        return Decision(False, f"the claim is bound to {volume_name}")
    provisioner = provisioner_annotation(claim)
    migrated_to = _annotations(claim).get(names.ANN_MIGRATED_TO)
    if driver_name not in (provisioner, migrated_to):
        return Decision(False, f"the claim is for provisioner {provisioner!r}, not ours")
    known = {driver_name, *known_names}
    if provisioner is None:
        return Decision(False, "the claim has no storage-provisioner annotation")
    if provisioner not in known:
        return Decision(False, f"the claim is migrated, but annotated for {provisioner!r}")
    if storage_class is None:
        quoted = gofmt.go_quote(claim_class_name(claim))
        raise ProvisioningError(
            f"storageClass {quoted} not found", state=ProvisioningState.NO_CHANGE
        )
    waits = storage_class.get("volumeBindingMode") == WAIT_FOR_FIRST_CONSUMER
    # Only the GA key counts: the library removes it to ask the scheduler for another node.
    if waits and not _annotations(claim).get(names.ANN_SELECTED_NODE):
        return Decision(False, "the class waits for the first consumer; no node is selected")
    if volume_exists:
        return Decision(False, "the claim's PersistentVolume exists already")
    if storage_class.get("provisioner") not in known:
        return Decision(False, "Unknown provisioner requested in claim's StorageClass")
    return Decision(True, "the claim needs a volume from us")


def may_reschedule(*, supports_topology: bool, selected_node: str | None) -> bool:
    """Whether a ResourceExhausted CreateVolume may send the claim back to the scheduler."""
    return supports_topology and bool(selected_node)


def missing_node_error(node_name: str) -> ProvisioningError:
    """The selected Node is gone: reschedule (the NotFound text of client-go's Node lister,
    which external-provisioner always gives the library: the singular resource name)."""
    return ProvisioningError(
        f"node {gofmt.go_quote(node_name)} not found", state=ProvisioningState.RESCHEDULE
    )


def node_lookup_error(error: str) -> ProvisioningError:
    """The selected Node could not be read for another reason: retry, unchanged."""
    message = names.MESSAGE_TARGET_NODE_FAILED.format(error=error)
    return ProvisioningError(message, state=ProvisioningState.NO_CHANGE)


def claim_key(claim: Mapping[str, Any]) -> str:
    """`namespace/name`, as klog's `KObj` prints a claim."""
    meta = claim.get("metadata", {})
    namespace, name = meta.get("namespace", ""), meta.get("name", "")
    return f"{namespace}/{name}" if namespace else name


def provisioning_message(claim: Mapping[str, Any]) -> str:
    """The Normal `Provisioning` event's message, posted on every attempt."""
    return names.MESSAGE_PROVISIONING.format(claim=claim_key(claim))


def succeeded_message(volume_name: str) -> str:
    """The Normal `ProvisioningSucceeded` event's message, once the PV is saved."""
    return names.MESSAGE_PROVISIONING_SUCCEEDED.format(volume=volume_name)
