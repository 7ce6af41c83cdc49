"""Node deployment (`--node-deployment`): which claims this node's provisioner may take.

With one provisioner per node (local volumes), a claim whose `selected-node` names another node
is not ours. A claim without one (Immediate binding) is raced for: each provisioner waits a
random delay, then tries to write its own node into `selected-node` with a resourceVersion
precondition; the first writer wins and the others see a conflict (external-provisioner's
`becomeOwner`). The delay grows with the failures, from the base to the max delay.
"""

from __future__ import annotations

import enum
import random
from collections.abc import Callable, Mapping
from typing import Any

from kopf_csi import names
from kopf_csi.provisioning.decisions import selected_node
from kopf_csi.provisioning.options import ProvisionerOptions

__all__ = ["Ownership", "claim_delay", "ownership", "selected_node_patch"]


class Ownership(enum.Enum):
    OURS = "ours"
    """Provision it (it names our node, or node deployment is off)."""
    NOT_OURS = "not-ours"
    """Another node's claim, or one the scheduler will place: leave it."""
    COMPETE = "compete"
    """An Immediate claim with no node yet: try to claim it after a delay."""


def ownership(
    claim: Mapping[str, Any], storage_class: Mapping[str, Any], *, options: ProvisionerOptions
) -> Ownership:
    if not options.node_deployment:
        return Ownership.OURS
    node = selected_node(claim)
    if node:
        return Ownership.OURS if node == options.node_name else Ownership.NOT_OURS
    if storage_class.get("volumeBindingMode") == "WaitForFirstConsumer":
        return Ownership.NOT_OURS  # the scheduler picks the node
    if not options.node_deployment_immediate_binding:
        return Ownership.NOT_OURS
    return Ownership.COMPETE


def claim_delay(
    failures: int,
    *,
    options: ProvisionerOptions,
    uniform: Callable[[float, float], float] = random.uniform,
) -> float:
    """A random wait before competing, growing with earlier attempts, capped at the max."""
    upper = min(options.node_deployment_base_delay * 2**failures, options.node_deployment_max_delay)
    return uniform(min(options.node_deployment_base_delay, upper), upper)


def selected_node_patch(claim: Mapping[str, Any], *, node_name: str) -> dict[str, Any]:
    """A merge patch that claims the PVC for the node, failing (409) if anyone wrote first."""
    return {
        "metadata": {
            "resourceVersion": claim["metadata"]["resourceVersion"],
            "annotations": {names.ANN_SELECTED_NODE: node_name},
        }
    }
