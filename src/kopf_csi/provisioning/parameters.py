"""StorageClass parameters: which go to the driver, which are ours, and the filesystem type.

Keys under `csi.storage.k8s.io/` are instructions to the provisioner (secrets, fstype) and are
stripped before CreateVolume; an unknown key under that prefix is a final error, so that a typo
never silently reaches the driver. The deprecated unprefixed keys (`fstype`,
`csiProvisionerSecretName`, ...) are honoured but, for backward compatibility, not stripped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kopf_csi import names
from kopf_csi.provisioning.errors import ProvisioningError
from kopf_csi.provisioning.states import ProvisioningState

__all__ = ["driver_parameters", "fs_type", "with_create_metadata"]


def driver_parameters(parameters: Mapping[str, str] | None) -> dict[str, str]:
    """The parameters CreateVolume gets: all but the reserved `csi.storage.k8s.io/*` keys."""
    result: dict[str, str] = {}
    for key, value in sorted((parameters or {}).items()):  # sorted: a stable first error
        if not key.startswith(names.PARAMETER_PREFIX):
            result[key] = value
        elif key not in names.RESERVED_PARAMETERS:
            raise ProvisioningError(
                "failed to strip CSI Parameters of prefixed keys: found unknown parameter key"
                f' "{key}" with reserved namespace {names.PARAMETER_PREFIX}',
                state=ProvisioningState.FINISHED,
            )
    return result


def fs_type(parameters: Mapping[str, str] | None, *, default: str = "") -> str:
    """The filesystem type: `csi.storage.k8s.io/fstype`, or the deprecated `fstype` key.

    The deprecated key is matched case-insensitively; naming the type twice is a final error.
    An empty result falls back to `--default-fstype` (itself "" by default: no fstype).
    """
    found = [
        value
        for key, value in (parameters or {}).items()
        if key.lower() == names.PARAM_DEPRECATED_FSTYPE or key == names.PARAM_FSTYPE
    ]
    if len(found) > 1:
        raise ProvisioningError(
            f'fstype specified in parameters with both "fstype" and "{names.PARAM_FSTYPE}" keys',
            state=ProvisioningState.FINISHED,
        )
    return (found[0] if found else "") or default


def with_create_metadata(
    parameters: Mapping[str, str], *, claim: Mapping[str, Any], volume_name: str
) -> dict[str, str]:
    """`--extra-create-metadata`: the claim's name and namespace and the PV name, added."""
    metadata = claim.get("metadata", {})
    return {
        **parameters,
        names.PARAM_PVC_NAME: metadata.get("name", ""),
        names.PARAM_PVC_NAMESPACE: metadata.get("namespace", ""),
        names.PARAM_PV_NAME: volume_name,
    }
