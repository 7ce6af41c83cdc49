"""Names: the PV's (= the CSI volume's), the provisioner's identity, and the StorageClass's.

The PV name is also CreateVolume's `name`, the idempotency key: the same claim always maps to the
same name, so a retried (or restarted) CreateVolume finds the volume it already made instead of
creating a second one. It must be computed exactly as external-provisioner's `makeVolumeName`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kopf_csi import names
from kopf_csi.provisioning.errors import ProvisioningError
from kopf_csi.provisioning.states import ProvisioningState

__all__ = [
    "claim_class_name",
    "claim_volume_name",
    "provisioner_identity",
    "volume_class_name",
    "volume_name",
]


def volume_name(*, prefix: str, uid: str, uuid_length: int = -1) -> str:
    """`<prefix>-<uid>`; with `uuid_length` N >= 0, the UID without dashes, cut to N characters."""
    if not prefix:
        raise ProvisioningError(
            "volume name prefix cannot be of length 0", state=ProvisioningState.FINISHED
        )
    if not uid:
        raise ProvisioningError(
            "corrupted PVC object, it is missing UID", state=ProvisioningState.FINISHED
        )
    if uuid_length == -1:
        return f"{prefix}-{uid}"
    return f"{prefix}-{uid.replace('-', '')[:uuid_length]}"


def claim_volume_name(claim: Mapping[str, Any], *, prefix: str, uuid_length: int = -1) -> str:
    """The PV name for a claim (its `metadata.uid`)."""
    return volume_name(
        prefix=prefix, uid=claim.get("metadata", {}).get("uid") or "", uuid_length=uuid_length
    )


def provisioner_identity(*, driver_name: str, millis: int, random_number: int) -> str:
    """`<unix ms>-<0..9999>-<driver>`: stamped into every PV's volumeAttributes at start-up.

    The caller picks `millis` (the start time) and `random_number` (`random.randrange(10000)`),
    once per process, as external-provisioner does in its `main`.
    """
    return f"{millis}-{random_number}-{driver_name}"


def claim_class_name(claim: Mapping[str, Any]) -> str:
    """The claim's StorageClass: the beta annotation wins over `spec.storageClassName`."""
    annotations = claim.get("metadata", {}).get("annotations") or {}
    if names.ANN_BETA_STORAGE_CLASS in annotations:
        return str(annotations[names.ANN_BETA_STORAGE_CLASS])
    return str(claim.get("spec", {}).get("storageClassName") or "")


def volume_class_name(volume: Mapping[str, Any]) -> str:
    """The PV's StorageClass, read the same way (the beta annotation first)."""
    return claim_class_name(volume)
