"""Which RPCs must carry secrets, and the check that they do.

A missing or wrong secret is UNAUTHENTICATED (the spec's general table: the RPC "does not carry
secrets that are valid for authentication"). Error messages name the missing *keys* at most,
never a value: secrets must never reach a log line or a status message.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping

from kopf_csi.csi.codes import Code
from kopf_csi.driver.config import SecretsPolicy
from kopf_csi.driver.errors import DriverError

__all__ = ["ALIASES", "SECRET_BEARING", "check", "parse_operations"]

# Every RPC whose request has a `secrets` field (CSI v1.12, the ones this driver serves).
SECRET_BEARING = frozenset(
    {
        "CreateVolume",
        "DeleteVolume",
        "ControllerPublishVolume",
        "ControllerUnpublishVolume",
        "ValidateVolumeCapabilities",
        "ListSnapshots",
        "CreateSnapshot",
        "DeleteSnapshot",
        "GetSnapshot",
        "ControllerExpandVolume",
        "ControllerModifyVolume",
        "NodeStageVolume",
        "NodePublishVolume",
        "NodeExpandVolume",
        "CreateVolumeGroupSnapshot",
        "DeleteVolumeGroupSnapshot",
        "GetVolumeGroupSnapshot",
    }
)

# Short names, after the Go sidecars' secret parameters (csi.storage.k8s.io/<alias>-secret-name).
ALIASES: Mapping[str, frozenset[str]] = {
    "provisioner": frozenset({"CreateVolume", "DeleteVolume"}),
    "create": frozenset({"CreateVolume"}),
    "delete": frozenset({"DeleteVolume"}),
    "controller-publish": frozenset({"ControllerPublishVolume", "ControllerUnpublishVolume"}),
    "node-stage": frozenset({"NodeStageVolume"}),
    "node-publish": frozenset({"NodePublishVolume"}),
    "controller-expand": frozenset({"ControllerExpandVolume"}),
    "node-expand": frozenset({"NodeExpandVolume"}),
    "snapshotter": frozenset({"CreateSnapshot", "DeleteSnapshot", "ListSnapshots", "GetSnapshot"}),
    "group-snapshotter": frozenset(
        {"CreateVolumeGroupSnapshot", "DeleteVolumeGroupSnapshot", "GetVolumeGroupSnapshot"}
    ),
    "modify": frozenset({"ControllerModifyVolume"}),
    "validate": frozenset({"ValidateVolumeCapabilities"}),
    "all": SECRET_BEARING,
}


def parse_operations(text: str) -> frozenset[str]:
    """`create,node-stage,DeleteSnapshot` → the RPC names; ValueError for an unknown name."""
    methods: set[str] = set()
    for word in filter(None, (w.strip() for w in text.split(","))):
        if word in ALIASES:
            methods |= ALIASES[word]
        elif word in SECRET_BEARING:
            methods.add(word)
        else:
            known = ", ".join(sorted({*ALIASES, *SECRET_BEARING}))
            raise ValueError(f"unknown secrets operation {word!r}; known: {known}")
    return frozenset(methods)


def check(method: str, secrets: Mapping[str, str], *, policy: SecretsPolicy) -> None:
    """UNAUTHENTICATED unless `method` carries the secrets the policy asks of it."""
    if method not in policy.required_for:
        return
    if not secrets:
        raise DriverError(Code.UNAUTHENTICATED, f"{method} requires secrets")
    if policy.expected is None:
        return
    missing = sorted(key for key in policy.expected if key not in secrets)
    if missing:
        raise DriverError(Code.UNAUTHENTICATED, f"{method} lacks secret keys {missing}")
    # Constant-time comparison: this is the one place a secret value is looked at.
    if not all(
        hmac.compare_digest(secrets[key].encode(), value.encode())
        for key, value in policy.expected.items()
    ):
        raise DriverError(Code.UNAUTHENTICATED, f"{method} carries invalid secrets")
