"""Is a claim's volume in use? Asked only after an offline-only driver said so.

external-resizer answers this from a pod informer over the whole cluster (`inUsePVCStore`),
which holds every pod in memory and is a known cause of its OOM kills (external-resizer #211,
aws-fsx-csi-driver #502, Azure/local-csi-driver #208). Here nothing about pods is kept: only
when ControllerExpandVolume has failed with FailedPrecondition does the next attempt ask,

1. from the VolumeAttachment cache the operator keeps anyway, whether any VA still references
   the PV (a volume attached to a node is in use for the driver, whether or not a pod
   remains); then, if none does,
2. with one LIST of the pods in the claim's namespace, whether a pod that has not terminated
   mounts the claim (drivers without ControllerPublish have no VAs).

Attempts are retried with the claim's backoff, and at once when a VA of the PV changes or
goes (the handlers watch VAs; the PVC's own changes re-queue it as always).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["attachments_of", "pods_using"]

Body = Mapping[str, Any]


def attachments_of(volume: str, attachments: Iterable[Body]) -> list[str]:
    """Names of the VAs that attach this PV."""
    return [
        str(va["metadata"]["name"])
        for va in attachments
        if ((va.get("spec") or {}).get("source") or {}).get("persistentVolumeName") == volume
    ]


def pods_using(claim: str, pods: Iterable[Body]) -> list[str]:
    """Names of the pods that mount the claim and have not terminated (upstream's check)."""
    found = []
    for pod in pods:
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        for volume in (pod.get("spec") or {}).get("volumes") or ():
            if (volume.get("persistentVolumeClaim") or {}).get("claimName") == claim:
                found.append(str(pod["metadata"]["name"]))
                break
    return found
