"""What the sandbox prints: the component checks and each object's steps, with timings.

Pure formatting over the emulator's change feed: a `Tracker` turns changes into lines such as
`+0.031s  pvc default/data  Bound to pvc-1f0c…`, printing only what changed for a reader.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["Check", "Tracker", "format_checks"]

Body = Mapping[str, Any]
PROVISIONER_KEY = "volume.kubernetes.io/storage-provisioner"


@dataclasses.dataclass(frozen=True)
class Check:
    component: str
    ok: bool
    detail: str


def format_checks(checks: Iterable[Check]) -> str:
    rows = list(checks)
    width = max(len(c.component) for c in rows)
    lines = [f"  {'component'.ljust(width)}  status  detail"]
    for check in rows:
        status = "ok    " if check.ok else "FAILED"
        lines.append(f"  {check.component.ljust(width)}  {status}  {check.detail}")
    return "\n".join(lines)


def _claim_steps(claim: Body) -> list[str]:
    meta, spec, status = claim["metadata"], claim.get("spec", {}), claim.get("status", {})
    steps = []
    annotations = meta.get("annotations") or {}
    if PROVISIONER_KEY in annotations:
        steps.append(f"waiting for provisioner {annotations[PROVISIONER_KEY]}")
    if "volume.kubernetes.io/selected-node" in annotations:
        steps.append(f"node selected: {annotations['volume.kubernetes.io/selected-node']}")
    if spec.get("volumeName"):
        steps.append(f"volume {spec['volumeName']}")
    if status.get("phase"):
        steps.append(str(status["phase"]))
    if meta.get("deletionTimestamp"):
        steps.append("deleting")
    return steps


def _volume_steps(volume: Body) -> list[str]:
    spec, status = volume.get("spec", {}), volume.get("status", {})
    steps = [
        f"{spec.get('capacity', {}).get('storage', '?')} {spec.get('csi', {}).get('driver', '')}"
    ]
    if status.get("phase"):
        steps.append(str(status["phase"]))
    if volume["metadata"].get("deletionTimestamp"):
        steps.append("deleting")
    return steps


def _attachment_steps(attachment: Body) -> list[str]:
    spec, status = attachment.get("spec", {}), attachment.get("status", {})
    source = spec.get("source", {}).get("persistentVolumeName", "?")
    steps = [f"{source} on {spec.get('nodeName', '?')}"]
    if status.get("attached"):
        steps.append("attached")
    if (status.get("attachError") or {}).get("message"):
        steps.append(f"attach error: {status['attachError']['message']}")
    if attachment["metadata"].get("deletionTimestamp"):
        steps.append("detaching")
    return steps


STEPS = {
    "persistentvolumeclaims": ("pvc", _claim_steps),
    "persistentvolumes": ("pv", _volume_steps),
    "volumeattachments": ("va", _attachment_steps),
}


class Tracker:
    """Remembers what was shown per object; `lines()` gives only what is new."""

    def __init__(self, *, started: float | None = None) -> None:
        self.started = time.monotonic() if started is None else started
        self._seen: dict[tuple[str, str], list[str]] = {}

    def lines(self, change_type: str, plural: str, obj: Body) -> list[str]:
        if plural not in STEPS:
            return []
        short, steps_of = STEPS[plural]
        meta = obj["metadata"]
        name = f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]
        key = (plural, name)
        stamp = f"+{time.monotonic() - self.started:7.3f}s"
        label = f"{short} {name}"
        if change_type == "DELETED":
            self._seen.pop(key, None)
            return [f"  {stamp}  {label}  deleted"]
        steps = steps_of(obj)
        before = self._seen.get(key)
        self._seen[key] = steps
        if before is None:
            return [f"  {stamp}  {label}  created" + (f": {', '.join(steps)}" if steps else "")]
        new = [step for step in steps if step not in before]
        return [f"  {stamp}  {label}  {step}" for step in new]
