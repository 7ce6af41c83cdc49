"""Access modes and volume modes as CSI VolumeCapabilities, as csi-lib-utils maps them.

We test these aspects:
- each access mode, with and without SINGLE_NODE_MULTI_WRITER;
- combinations for the single-capability (attacher) variant, RWX trumping, and the errors;
- block vs mount, with fstype and mount flags;
- the provisioner's one-capability-per-mode list keeps the claim's order.
"""

from __future__ import annotations

import pytest

from kopf_csi.csi import messages as csi
from kopf_csi.provisioning import capabilities
from kopf_csi.provisioning.capabilities import AccessModeError

Mode = csi.VolumeCapabilityAccessModeMode
RWO, ROX, RWX, RWOP = "ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod"


@pytest.mark.parametrize(
    ("modes", "snmw", "expected"),
    [
        pytest.param([RWO], False, Mode.SINGLE_NODE_WRITER, id="RWO -> single node writer"),
        pytest.param(
            [RWO],
            True,
            Mode.SINGLE_NODE_MULTI_WRITER,
            id="RWO with SNMW -> single node multi writer",
        ),
        pytest.param([ROX], False, Mode.MULTI_NODE_READER_ONLY, id="ROX -> multi node reader only"),
        pytest.param([ROX], True, Mode.MULTI_NODE_READER_ONLY, id="ROX with SNMW -> unchanged"),
        pytest.param(
            [RWX], False, Mode.MULTI_NODE_MULTI_WRITER, id="RWX -> multi node multi writer"
        ),
        pytest.param([RWX], True, Mode.MULTI_NODE_MULTI_WRITER, id="RWX with SNMW -> unchanged"),
        pytest.param([RWOP], False, Mode.SINGLE_NODE_WRITER, id="RWOP -> single node writer"),
        pytest.param(
            [RWOP],
            True,
            Mode.SINGLE_NODE_SINGLE_WRITER,
            id="RWOP with SNMW -> single node single writer",
        ),
        pytest.param([RWO, RWX], False, Mode.MULTI_NODE_MULTI_WRITER, id="RWO+RWX -> RWX trumps"),
        pytest.param([ROX, RWX], True, Mode.MULTI_NODE_MULTI_WRITER, id="ROX+RWX -> RWX trumps"),
        pytest.param([RWO, RWO], False, Mode.SINGLE_NODE_WRITER, id="duplicates -> as one"),
        pytest.param(
            [RWOP, RWOP], True, Mode.SINGLE_NODE_SINGLE_WRITER, id="RWOP twice -> still alone"
        ),
    ],
)
def test_csi_access_mode(modes: list[str], snmw: bool, expected: Mode) -> None:
    assert capabilities.csi_access_mode(modes, single_node_multi_writer=snmw) == expected


@pytest.mark.parametrize(
    ("modes", "message"),
    [
        pytest.param(
            [RWOP, RWO],
            "Kubernetes does not support use of ReadWriteOncePod with other access modes on the"
            " same PersistentVolume",
            id="RWOP with another -> error",
        ),
        pytest.param(
            [ROX, RWO],
            "CSI does not support ReadOnlyMany and ReadWriteOnce on the same PersistentVolume",
            id="ROX+RWO -> error",
        ),
        pytest.param([], "unsupported AccessMode combination: []", id="none -> error"),
        pytest.param(
            ["Bogus"], "unsupported AccessMode combination: [Bogus]", id="unknown -> error"
        ),
    ],
)
@pytest.mark.parametrize("snmw", [False, True], ids=["plain", "snmw"])
def test_invalid_combinations(modes: list[str], message: str, snmw: bool) -> None:
    with pytest.raises(AccessModeError) as info:
        capabilities.csi_access_mode(modes, single_node_multi_writer=snmw)
    assert str(info.value) == message


def test_block_capability() -> None:
    cap = capabilities.volume_capability(
        access_modes=[RWO], block=True, fs_type="ext4", mount_flags=["ro"]
    )
    assert cap == csi.VolumeCapability(
        block=csi.VolumeCapabilityBlockVolume(),
        access_mode=csi.VolumeCapabilityAccessMode(mode=Mode.SINGLE_NODE_WRITER),
    )  # fstype and flags do not apply to block


def test_mount_capability() -> None:
    cap = capabilities.volume_capability(
        access_modes=[RWX], block=False, fs_type="xfs", mount_flags=["noatime", "discard"]
    )
    assert cap == csi.VolumeCapability(
        mount=csi.VolumeCapabilityMountVolume(fs_type="xfs", mount_flags=["noatime", "discard"]),
        access_mode=csi.VolumeCapabilityAccessMode(mode=Mode.MULTI_NODE_MULTI_WRITER),
    )


def test_one_capability_per_mode_in_order() -> None:
    caps = capabilities.volume_capabilities(
        access_modes=[ROX, RWO], block=False, single_node_multi_writer=True
    )
    assert [c.access_mode.mode for c in caps if c.access_mode] == [
        Mode.MULTI_NODE_READER_ONLY,
        Mode.SINGLE_NODE_MULTI_WRITER,
    ]  # each mode alone: ROX+RWO is fine for the provisioner
    assert all(c.mount == csi.VolumeCapabilityMountVolume() for c in caps)


def test_no_modes_no_capabilities() -> None:
    assert capabilities.volume_capabilities(access_modes=[], block=False) == []
