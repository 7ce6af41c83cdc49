"""A stand-in for kube-scheduler: a pod that names no node is given one.

Scaffolding for the sandbox, not part of the operator. Its users create pods with kubectl
(`kubectl apply -k manifests/examples`); without a scheduler a pod would name no node forever,
and a WaitForFirstConsumer claim it uses would stay Pending (kcm's stand-in selects the claim's
node only once a pod names one), however correct the operator.

What it mirrors: the scheduler's bind (the ``pods/binding`` subresource, which sets
``spec.nodeName``, as ``kube-scheduler``) and its ``Scheduled`` event, ``Successfully assigned
<namespace>/<pod> to <node>``, from ``default-scheduler``. The node is the first by name that is
not unschedulable: a stand-in for a cluster of one node (the sandbox's), not a scheduler.

Left out: filtering and scoring (resources, affinity, taints, volume topology), volume binding
before the bind (kcm's stand-in sets ``selected-node`` after it), preemption, and the
``FailedScheduling`` event while no node fits (the pod then simply waits for one).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import ClassVar

from kopf_csi.testing.emulator import Body, EmulatedCluster, StatusError
from kopf_csi.testing.kcmevents import EventRecorder
from kopf_csi.testing.standins import PassingStandIn

__all__ = ["Scheduler", "pick_node"]

log = logging.getLogger(__name__)

COMPONENT = "default-scheduler"


def pick_node(nodes: list[Body]) -> str | None:
    """The first node by name that takes pods (not cordoned, not being deleted), or None."""
    usable = sorted(
        node["metadata"]["name"]
        for node in nodes
        if not (node.get("spec") or {}).get("unschedulable")
        and not node["metadata"].get("deletionTimestamp")
    )
    return usable[0] if usable else None


def _unscheduled(pod: Body) -> bool:
    return not (pod.get("spec") or {}).get("nodeName") and not pod["metadata"].get(
        "deletionTimestamp"
    )


def _post_now(
    method: str, namespace: str | None, name: str | None, write: Callable[[], Body]
) -> None:
    """An event is written here and now (the stand-in takes no time)."""
    write()


class Scheduler(PassingStandIn):
    """``async with Scheduler(cluster): ...`` binds every pod that names no node."""

    watched: ClassVar[tuple[str, ...]] = ("pods", "nodes")
    task_name = "kube-scheduler"
    manager = "kube-scheduler"

    def __init__(self, cluster: EmulatedCluster) -> None:
        super().__init__(cluster)
        self._events = EventRecorder(
            cluster,
            manager=self.manager,
            component=COMPONENT,
            send=_post_now,
            resyncing=lambda: False,
        )

    def sync(self) -> None:
        """Bind every unscheduled pod to the node `pick_node` chooses, if any."""
        node = pick_node(list(self._cache["nodes"].values()))
        if node is None:
            return
        for pod in list(self._cache["pods"].values()):
            if not _unscheduled(pod):
                continue
            try:
                self._patch("pods", pod, {"spec": {"nodeName": node}})
            except StatusError as error:  # deleted meanwhile: nothing to bind
                log.warning("scheduler stand-in: %s: %s", pod["metadata"]["name"], error)
                continue
            meta = pod["metadata"]
            message = f"Successfully assigned {meta.get('namespace')}/{meta['name']} to {node}"
            self._events.record(pod, "Normal", "Scheduled", message)
