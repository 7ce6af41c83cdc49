"""What the controllers tell whoever watches them (metrics), as plain protocols.

The operations call these hooks at the points where the Go library updates its Prometheus
metrics (`updateProvisionStats`, `updateDeleteStats`). Only `kopf_csi.metrics` implements
them, so no controller module imports prometheus_client; without an observer nothing is
recorded and nothing is imported.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

__all__ = ["ProvisioningObserver", "claim_labels", "volume_class"]


class ProvisioningObserver(Protocol):
    """Outcomes of provisioning and deletion attempts, labelled as the Go library does."""

    def provisioned(self, *, class_name: str, source: str, seconds: float) -> None:
        """A claim got its volume (and its PV) after `seconds` of this attempt."""

    def provision_failed(self, *, class_name: str, source: str) -> None:
        """An attempt to provision a claim failed (it is retried or given up as usual)."""

    def deleted(self, *, class_name: str, seconds: float) -> None:
        """A released volume was deleted from the driver, and its PV removed."""

    def delete_failed(self, *, class_name: str) -> None:
        """An attempt to delete a released volume failed (including: still attached)."""


def claim_labels(claim: Mapping[str, Any]) -> tuple[str, str]:
    """`class` and `source` as the library reads them: spec.storageClassName, dataSource.kind."""
    spec = claim.get("spec") or {}
    source = spec.get("dataSource") or {}
    return spec.get("storageClassName") or "", source.get("kind") or ""


def volume_class(volume: Mapping[str, Any]) -> str:
    """`class` of a PV: its spec.storageClassName ("" when it has none)."""
    return (volume.get("spec") or {}).get("storageClassName") or ""
