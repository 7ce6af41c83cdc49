"""Kubernetes access modes and volume modes as CSI `VolumeCapability` messages.

The mapping is csi-lib-utils' `accessmodes.ToCSIAccessMode`, shared by all the sidecars. It
depends on whether the driver has SINGLE_NODE_MULTI_WRITER: without it, ReadWriteOnce and
ReadWriteOncePod both become SINGLE_NODE_WRITER; with it, they become SINGLE_NODE_MULTI_WRITER
and SINGLE_NODE_SINGLE_WRITER. The provisioner sends one capability per access mode of the claim
(`volume_capabilities`); the attacher sends one capability covering all the PV's modes
(`volume_capability`), which is where the invalid combinations can show up.

This module depends only on the CSI messages, so that the attacher can use it too.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from kopf_csi.csi import messages as csi
from kopf_csi.provisioning import gofmt

__all__ = [
    "READ_ONLY_MANY",
    "READ_WRITE_MANY",
    "READ_WRITE_ONCE",
    "READ_WRITE_ONCE_POD",
    "AccessModeError",
    "csi_access_mode",
    "volume_capabilities",
    "volume_capability",
]

READ_WRITE_ONCE = "ReadWriteOnce"
READ_ONLY_MANY = "ReadOnlyMany"
READ_WRITE_MANY = "ReadWriteMany"
READ_WRITE_ONCE_POD = "ReadWriteOncePod"

Mode = csi.VolumeCapabilityAccessModeMode


class AccessModeError(ValueError):
    """Access modes that CSI cannot express; the messages are csi-lib-utils'."""


def csi_access_mode(access_modes: Sequence[str], *, single_node_multi_writer: bool) -> Mode:
    """The one CSI access mode for a set of Kubernetes access modes."""
    modes = set(access_modes)
    if READ_WRITE_ONCE_POD in modes:
        if len(modes) > 1:
            raise AccessModeError(
                "Kubernetes does not support use of ReadWriteOncePod with other access modes"
                " on the same PersistentVolume"
            )
        return (
            Mode.SINGLE_NODE_SINGLE_WRITER if single_node_multi_writer else Mode.SINGLE_NODE_WRITER
        )
    if READ_WRITE_MANY in modes:  # it trumps everything else
        return Mode.MULTI_NODE_MULTI_WRITER
    if READ_ONLY_MANY in modes and READ_WRITE_ONCE in modes:
        raise AccessModeError(
            "CSI does not support ReadOnlyMany and ReadWriteOnce on the same PersistentVolume"
        )
    if READ_ONLY_MANY in modes:
        return Mode.MULTI_NODE_READER_ONLY
    if READ_WRITE_ONCE in modes:
        return (
            Mode.SINGLE_NODE_MULTI_WRITER if single_node_multi_writer else Mode.SINGLE_NODE_WRITER
        )
    raise AccessModeError(f"unsupported AccessMode combination: {gofmt.go_list(access_modes)}")


def volume_capability(
    *,
    access_modes: Sequence[str],
    block: bool,
    fs_type: str = "",
    mount_flags: Iterable[str] = (),
    single_node_multi_writer: bool = False,
) -> csi.VolumeCapability:
    """One capability for all the modes: `block{}`, or `mount{fs_type, mount_flags}`."""
    mode = csi_access_mode(access_modes, single_node_multi_writer=single_node_multi_writer)
    access_mode = csi.VolumeCapabilityAccessMode(mode=mode)
    if block:
        return csi.VolumeCapability(
            block=csi.VolumeCapabilityBlockVolume(), access_mode=access_mode
        )
    mount = csi.VolumeCapabilityMountVolume(fs_type=fs_type, mount_flags=list(mount_flags))
    return csi.VolumeCapability(mount=mount, access_mode=access_mode)


def volume_capabilities(
    *,
    access_modes: Sequence[str],
    block: bool,
    fs_type: str = "",
    mount_flags: Iterable[str] = (),
    single_node_multi_writer: bool = False,
) -> list[csi.VolumeCapability]:
    """One capability per access mode, in the claim's order (what CreateVolume gets)."""
    flags = list(mount_flags)
    return [
        volume_capability(
            access_modes=[access_mode],
            block=block,
            fs_type=fs_type,
            mount_flags=flags,
            single_node_multi_writer=single_node_multi_writer,
        )
        for access_mode in access_modes
    ]
