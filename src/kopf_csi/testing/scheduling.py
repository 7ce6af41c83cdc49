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

import datetime
import logging
import uuid
from typing import ClassVar

from kopf_csi.testing.emulator import Body, StatusError
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


class Scheduler(PassingStandIn):
    """``async with Scheduler(cluster): ...`` binds every pod that names no node."""

    watched: ClassVar[tuple[str, ...]] = ("pods", "nodes")
    task_name = "kube-scheduler"
    manager = "kube-scheduler"

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
            self._event(pod, node)

    def _event(self, pod: Body, node: str) -> None:
        meta = pod["metadata"]
        namespace = meta.get("namespace") or "default"
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        self.cluster.create(
            "events",
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {
                    "name": f"{meta['name']}.{uuid.uuid4().hex[:16]}",
                    "namespace": namespace,
                },
                "involvedObject": {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": meta["name"],
                    "namespace": namespace,
                    "uid": meta.get("uid"),
                },
                "reason": "Scheduled",
                "message": f"Successfully assigned {namespace}/{meta['name']} to {node}",
                "type": "Normal",
                "source": {"component": COMPONENT},
                "reportingComponent": COMPONENT,
                "firstTimestamp": now,
                "lastTimestamp": now,
                "count": 1,
            },
            manager=self.manager,
        )
