"""Watching the run: a cluster that can be read without copies, and the duplicate-effect counter.

`ChaosCluster` is an `EmulatedCluster` with `peek()`: the stored objects themselves, for
read-only snapshots taken many times a second (the public `objects()` deep-copies each one).

`Duplicates` subscribes to the driver's call log (`kopf_csi.driver.calllog`). Each record
arrives synchronously, as the driver saves the effect, on the loop that also runs the emulated
API: so the API state it reads is the state at the very moment of the effect. It counts:

- a CreateVolume that made a *new* volume for a name that already had one made (the
  provisioner names volumes after the claim's uid: a second one is a duplicate provisioning);
- a DeleteVolume that removed the volume of a PV whose claim still exists and is not being
  deleted (the data of a live claim destroyed);
- a ControllerPublishVolume that made a new attachment for a (volume, node) pair that had been
  published before in this run (each pair is attached once per run by the scenario);
- a ControllerUnpublishVolume that removed an attachment whose VolumeAttachment still exists
  and is not being deleted (a live attachment detached).
"""

from __future__ import annotations

import collections
from typing import Any, Self

from kopf_csi.driver.calllog import CallRecord
from kopf_csi.testing.emulator import Body, EmulatedCluster

__all__ = ["ChaosCluster", "Duplicates"]


class ChaosCluster(EmulatedCluster):
    """An emulated cluster with a copy-free read for snapshots."""

    async def __aenter__(self) -> Self:
        await super().__aenter__()
        return self

    def peek(self, resource: str) -> list[Body]:
        """The stored objects themselves: read them, never change them, never keep them."""
        return list(self._store[self.kind(resource)].values())

    def deleting(self) -> list[Body]:
        """Every object of every kind with a deletionTimestamp (with its kind set)."""
        found: list[Body] = []
        for kind, objects in self._store.items():
            for obj in objects.values():
                if (obj.get("metadata") or {}).get("deletionTimestamp"):
                    found.append({**obj, "kind": kind.kind})
        return found


class Duplicates:
    """Effects done twice, or done to live objects; `problems` names each one."""

    def __init__(self, cluster: ChaosCluster, *, driver: str) -> None:
        self.cluster = cluster
        self.driver = driver
        self.problems: list[str] = []
        self.created: collections.Counter[str] = collections.Counter()
        self.published: collections.Counter[tuple[str, str]] = collections.Counter()

    def observe(self, record: CallRecord) -> None:
        if record.method == "CreateVolume" and record.outcome == "created":
            self.created[record.name] += 1
            if self.created[record.name] > 1:
                self.problems.append(f"CreateVolume made volume #{self.created[record.name]}"
                                     f" for {record.name}")  # fmt: skip
        elif record.method == "DeleteVolume" and record.outcome == "deleted":
            claim = self._live_claim_of(record.volume_id)
            if claim is not None:
                self.problems.append(f"DeleteVolume {record.volume_id} of live claim {claim}")
        elif record.method == "ControllerPublishVolume" and record.outcome == "published":
            pair = (record.volume_id, record.node_id)
            self.published[pair] += 1
            if self.published[pair] > 1:
                self.problems.append(f"ControllerPublishVolume {record.volume_id} to"
                                     f" {record.node_id} again")  # fmt: skip
        elif record.method == "ControllerUnpublishVolume" and record.outcome == "unpublished":
            attachment = self._live_attachment(record.volume_id, record.node_id)
            if attachment is not None:
                self.problems.append(f"ControllerUnpublishVolume {record.volume_id} from"
                                     f" {record.node_id} while {attachment} is live")  # fmt: skip

    def _volumes_of(self, volume_id: str) -> list[Body]:
        return [
            pv
            for pv in self.cluster.peek("persistentvolumes")
            if _csi(pv).get("driver") == self.driver and _csi(pv).get("volumeHandle") == volume_id
        ]

    def _live_claim_of(self, volume_id: str) -> str | None:
        for pv in self._volumes_of(volume_id):
            ref = (pv.get("spec") or {}).get("claimRef") or {}
            if not ref.get("name"):
                continue
            claim = self.cluster.get("persistentvolumeclaims", ref.get("namespace"), ref["name"])
            meta = (claim or {}).get("metadata") or {}
            live = claim is not None and not meta.get("deletionTimestamp")
            if live and meta.get("uid") == ref.get("uid"):
                return f"{meta.get('namespace')}/{meta.get('name')}"
        return None

    def _live_attachment(self, volume_id: str, node_id: str) -> str | None:
        names = {(pv.get("metadata") or {}).get("name") for pv in self._volumes_of(volume_id)}
        for va in self.cluster.peek("volumeattachments"):
            spec: dict[str, Any] = va.get("spec") or {}
            source = (spec.get("source") or {}).get("persistentVolumeName")
            if spec.get("attacher") != self.driver or source not in names:
                continue
            if spec.get("nodeName") == node_id and not va["metadata"].get("deletionTimestamp"):
                return str(va["metadata"]["name"])
        return None


def _csi(pv: Body) -> Body:
    return (pv.get("spec") or {}).get("csi") or {}
