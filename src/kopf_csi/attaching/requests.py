"""ControllerPublishVolume and ControllerUnpublishVolume requests from a VA's PV spec.

external-attacher's `csiAttach`/`csiDetach` (csi_handler.go) with `GetVolumeCapabilities`
(util.go): the volume handle, one capability covering all the PV's access modes (csi-lib-utils'
mapping, shared with the provisioner), `readonly` only with PUBLISH_READONLY, the PV's volume
attributes as the volume context, the controller-publish secret. Reading the secret is I/O and
the caller's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from kopf_csi import names
from kopf_csi.attaching.errors import AttachError
from kopf_csi.csi import messages as csi
from kopf_csi.provisioning.capabilities import AccessModeError, volume_capability

__all__ = [
    "SecretRef",
    "csi_source",
    "publish_request",
    "publish_secret_ref",
    "unpublish_request",
    "volume_capability_for",
]

Body = Mapping[str, Any]


class SecretRef(NamedTuple):
    namespace: str
    name: str


def csi_source(spec: Body) -> Body:
    """The PV spec's `csi` source (`getCSISource`); a non-CSI PV cannot be attached by us."""
    source: Body | None = spec.get("csi")
    if not source:
        raise AttachError(names.MESSAGE_NON_CSI_SOURCE)
    return source


def publish_secret_ref(spec: Body) -> SecretRef | None:
    """`controllerPublishSecretRef`, for both ControllerPublish and ControllerUnpublish."""
    ref = csi_source(spec).get("controllerPublishSecretRef")
    if not ref:
        return None
    return SecretRef(namespace=str(ref.get("namespace") or ""), name=str(ref.get("name") or ""))


def volume_capability_for(
    spec: Body, *, single_node_multi_writer: bool, default_fstype: str
) -> csi.VolumeCapability:
    """One capability for all the PV's modes: block, or mount with fsType and mountOptions."""
    source = csi_source(spec)
    try:
        return volume_capability(
            access_modes=list(spec.get("accessModes") or ()),
            block=spec.get("volumeMode") == "Block",
            fs_type=str(source.get("fsType") or default_fstype),
            mount_flags=list(spec.get("mountOptions") or ()),
            single_node_multi_writer=single_node_multi_writer,
        )
    except AccessModeError as exc:
        raise AttachError(str(exc)) from None


def publish_request(
    spec: Body,
    *,
    node_id: str,
    secrets: Mapping[str, str],
    publish_readonly: bool,
    single_node_multi_writer: bool,
    default_fstype: str,
) -> csi.ControllerPublishVolumeRequest:
    """The request `csiAttach` sends; `readonly` is forced off without PUBLISH_READONLY."""
    source = csi_source(spec)
    capability = volume_capability_for(
        spec, single_node_multi_writer=single_node_multi_writer, default_fstype=default_fstype
    )
    # CSI: "CO MUST set this field to false if SP does not have the PUBLISH_READONLY
    # controller capability".
    readonly = bool(source.get("readOnly")) and publish_readonly
    return csi.ControllerPublishVolumeRequest(
        volume_id=str(source.get("volumeHandle") or ""),
        node_id=node_id,
        volume_capability=capability,
        readonly=readonly,
        secrets=dict(secrets),
        volume_context=dict(source.get("volumeAttributes") or {}),
    )


def unpublish_request(
    spec: Body, *, node_id: str, secrets: Mapping[str, str]
) -> csi.ControllerUnpublishVolumeRequest:
    """The request `csiDetach` sends."""
    source = csi_source(spec)
    return csi.ControllerUnpublishVolumeRequest(
        volume_id=str(source.get("volumeHandle") or ""), node_id=node_id, secrets=dict(secrets)
    )
