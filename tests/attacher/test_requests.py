"""ControllerPublish/UnpublishVolumeRequest from a PV spec, table-tested.

We test these aspects:
- the volume handle, node ID, volume context (the PV's `volumeAttributes`) and secrets;
- `readonly` only with PUBLISH_READONLY (the spec's MUST);
- one capability for all the PV's access modes, with and without SINGLE_NODE_MULTI_WRITER,
  and the csi-lib-utils errors for the combinations CSI cannot express;
- mount with the PV's fsType (or `--default-fstype`) and mountOptions; block for Block PVs;
- a PV without a CSI source cannot be published; the secret reference.
"""

from __future__ import annotations

from typing import Any

import pytest

from kopf_csi.attaching import requests
from kopf_csi.attaching.errors import AttachError
from kopf_csi.csi import messages as csi

Mode = csi.VolumeCapabilityAccessModeMode


def _spec(*, access_modes: tuple[str, ...] = ("ReadWriteOnce",), **fields: Any) -> dict[str, Any]:
    volume_mode = fields.pop("volumeMode", None)
    mount_options = fields.pop("mountOptions", None)
    spec: dict[str, Any] = {
        "accessModes": list(access_modes),
        "csi": {"driver": "d", "volumeHandle": "vol-1", **fields},
    }
    if volume_mode:
        spec["volumeMode"] = volume_mode
    if mount_options:
        spec["mountOptions"] = mount_options
    return spec


def _publish(spec: dict[str, Any], **kwargs: Any) -> csi.ControllerPublishVolumeRequest:
    options: dict[str, Any] = {
        "node_id": "node-id-1",
        "secrets": {},
        "publish_readonly": True,
        "single_node_multi_writer": False,
        "default_fstype": "",
    }
    return requests.publish_request(spec, **{**options, **kwargs})


def test_the_request_carries_the_volume_node_context_and_secrets() -> None:
    spec = _spec(volumeAttributes={"tier": "gold"})
    request = _publish(spec, secrets={"user": "admin"})
    assert request.volume_id == "vol-1"
    assert request.node_id == "node-id-1"
    assert request.volume_context == {"tier": "gold"}
    assert request.secrets == {"user": "admin"}
    assert request.readonly is False


@pytest.mark.parametrize(
    ("read_only", "publish_readonly", "expected"),
    [(True, True, True), (True, False, False), (False, True, False), (False, False, False)],
)
def test_readonly_only_with_publish_readonly(
    read_only: bool, publish_readonly: bool, expected: bool
) -> None:
    request = _publish(_spec(readOnly=read_only), publish_readonly=publish_readonly)
    assert request.readonly is expected


@pytest.mark.parametrize(
    ("modes", "snmw", "expected"),
    [
        (("ReadWriteOnce",), False, Mode.SINGLE_NODE_WRITER),
        (("ReadWriteOnce",), True, Mode.SINGLE_NODE_MULTI_WRITER),
        (("ReadWriteOncePod",), False, Mode.SINGLE_NODE_WRITER),
        (("ReadWriteOncePod",), True, Mode.SINGLE_NODE_SINGLE_WRITER),
        (("ReadOnlyMany",), False, Mode.MULTI_NODE_READER_ONLY),
        (("ReadWriteMany",), False, Mode.MULTI_NODE_MULTI_WRITER),
        (("ReadWriteOnce", "ReadWriteMany"), False, Mode.MULTI_NODE_MULTI_WRITER),
        (("ReadOnlyMany", "ReadWriteMany"), True, Mode.MULTI_NODE_MULTI_WRITER),
    ],
)
def test_one_capability_covers_all_access_modes(
    modes: tuple[str, ...], snmw: bool, expected: Mode
) -> None:
    request = _publish(_spec(access_modes=modes), single_node_multi_writer=snmw)
    assert request.volume_capability is not None
    assert request.volume_capability.access_mode is not None
    assert request.volume_capability.access_mode.mode == expected


@pytest.mark.parametrize(
    ("modes", "message"),
    [
        (("ReadOnlyMany", "ReadWriteOnce"),
         "CSI does not support ReadOnlyMany and ReadWriteOnce on the same PersistentVolume"),
        (("ReadWriteOncePod", "ReadWriteOnce"),
         "Kubernetes does not support use of ReadWriteOncePod with other access modes on the"
         " same PersistentVolume"),
        ((), "unsupported AccessMode combination: []"),
    ],
)  # fmt: skip
def test_access_modes_csi_cannot_express(modes: tuple[str, ...], message: str) -> None:
    with pytest.raises(AttachError) as error:
        _publish(_spec(access_modes=modes))
    assert error.value.message == message


@pytest.mark.parametrize(
    ("fs_type", "default", "expected"),
    [("xfs", "ext4", "xfs"), ("", "ext4", "ext4"), ("", "", "")],
)
def test_mount_uses_the_fstype_or_the_default(fs_type: str, default: str, expected: str) -> None:
    spec = _spec(fsType=fs_type, mountOptions=["noatime", "ro"])
    capability = _publish(spec, default_fstype=default).volume_capability
    assert capability is not None
    assert capability.mount is not None
    assert capability.mount.fs_type == expected
    assert capability.mount.mount_flags == ["noatime", "ro"]
    assert capability.block is None


def test_block_for_a_block_volume() -> None:
    capability = _publish(_spec(volumeMode="Block", fsType="xfs")).volume_capability
    assert capability is not None
    assert capability.block is not None
    assert capability.mount is None


def test_a_pv_without_a_csi_source_cannot_be_published() -> None:
    with pytest.raises(AttachError) as error:
        _publish({"accessModes": ["ReadWriteOnce"], "nfs": {"path": "/"}})
    assert error.value.message == "pv spec contained non-csi source that was not migrated"


def test_unpublish_request_and_the_secret_reference() -> None:
    spec = _spec(controllerPublishSecretRef={"name": "creds", "namespace": "ns"})
    request = requests.unpublish_request(spec, node_id="node-id-1", secrets={"k": "v"})
    assert (request.volume_id, request.node_id, request.secrets) == (
        "vol-1",
        "node-id-1",
        {"k": "v"},
    )
    assert requests.publish_secret_ref(spec) == requests.SecretRef(namespace="ns", name="creds")
    assert requests.publish_secret_ref(_spec()) is None
