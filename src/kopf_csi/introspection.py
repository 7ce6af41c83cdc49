"""The operator's side of explain: what `/debug/objects/<kind>/[<namespace>/]<name>` serves.

Read-only, from the running operator's memory: where the object's key stands in each work queue
(waiting and its place, being worked on and for how long, failed attempts, the next retry),
the CSI calls in flight for it (the RPC's name, for how long, its timeout: never the request),
the newest event the operator posted about it (its message in full, even after the Event has
expired), whether the claim is in the in-flight journal (a CreateVolume may be running), the
provisioners this replica serves, who holds its Leases, and each role's API rate limit when it
has held requests (how many, and the latest wait). Nothing here can hold a secret: keys,
counts, times, RPC names, Lease holders, and event messages, which the operator scrubs before it
posts them.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from kopf_csi import events, queueing, runtime

__all__ = ["object_state"]


def object_state(
    memo: Any, kind: str, namespace: str | None, name: str, uid: str | None
) -> dict[str, Any]:
    """What this operator knows about one object; call it on the operator's loop."""
    key = f"{namespace}/{name}" if namespace else name
    loop = asyncio.get_running_loop()
    queues = []
    for queue in queueing.started_queues(loop):
        state = queue.key_state(key)
        if state is not None:
            queues.append(
                {
                    "queue": state.queue,
                    "position": state.position,
                    "depth": state.depth,
                    "processing": state.processing,
                    "processing_for": state.processing_for,
                    "failures": state.failures,
                    "next_retry_in": state.next_retry_in,
                    "workers": queue.workers,
                    "busy": queue.in_flight,
                }
            )
    answer: dict[str, Any] = {"kind": kind, "key": key, "queues": queues}
    answer["calls"] = _calls_in_flight(memo, kind, namespace, name)
    answer["rate_limits"] = _rate_limits(memo, loop.time())
    standby = runtime.is_standby(memo)
    served = getattr(memo, "served_provisioners", None) or {}
    answer["standby"] = standby
    answer["provisioners"] = [] if standby else sorted(served)
    elector = getattr(memo, "leadership", None)
    if elector is not None:
        answer["identity"] = elector.identity
        answer["leases"] = dict(elector.holders)
    if uid:
        last = events.last_event(uid)
        if last is not None:
            answer["last_event"] = {
                "type": last.type,
                "reason": last.reason,
                "message": last.message,
                "age": time.monotonic() - last.at,
            }
        if kind == "persistentvolumeclaim":
            journals = [
                entry.provisioner.journal
                for entry in served.values()
                if getattr(entry.provisioner, "journal", None) is not None
            ]
            if journals:
                answer["journal"] = {"recorded": any(j.holds(uid) for j in journals)}
    return answer


def _rate_limits(memo: Any, now: float) -> dict[str, dict[str, Any]]:
    """Each role whose requests waited for its API rate limit (`--kube-api-qps`): the limit,
    how many waited and how long in all, and the latest wait (how long ago it began, its
    length)."""
    limits = getattr(getattr(memo, "api", None), "limits", None)
    if limits is None:
        return {}
    return {
        name: {
            "qps": bucket.qps,
            "burst": bucket.burst,
            "delayed": bucket.delayed,
            "waited": bucket.waited,
            "last_ago": now - bucket.last_delayed_at,
            "last_delay": bucket.last_delay,
        }
        for name, bucket in sorted(limits.buckets.items())
        if bucket.delayed and bucket.last_delayed_at is not None
    }


def _calls_in_flight(
    memo: Any, kind: str, namespace: str | None, name: str
) -> list[dict[str, Any]]:
    """The driver's unanswered calls for the object (the CSI client's registry)."""
    client = getattr(memo, "csi", None)
    if client is None:
        return []
    now = time.monotonic()
    return [
        {"rpc": call.rpc, "for": now - call.started, "timeout": call.timeout}
        for call in client.calls_in_flight(kind, namespace, name)
    ]
