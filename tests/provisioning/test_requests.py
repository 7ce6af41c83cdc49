"""The CreateVolume request, planned from the claim and class, then built from what was read.

We test these aspects:
- the plan: name, exact size, fstype, block vs mount, one capability per access mode;
- the order of `prepareProvision`'s final errors: data source, populator, capabilities,
  selector; each with the Go sidecar's message;
- the driver capabilities each kind of claim needs (clone, restore, VolumeAttributesClass);
- the request: stripped parameters, extra metadata, secrets, content source, topology, and the
  VolumeAttributesClass's parameters (for our driver only).
"""

from __future__ import annotations

from typing import Any

import pytest

from kopf_csi.csi import messages as csi
from kopf_csi.provisioning import requests
from kopf_csi.provisioning.errors import IgnoredError, ProvisioningError
from kopf_csi.provisioning.options import ProvisionerOptions
from kopf_csi.provisioning.sources import SourceKind
from kopf_csi.provisioning.states import ProvisioningState

from .factories import DRIVER, PV_NAME, make_claim, make_class

Mode = csi.VolumeCapabilityAccessModeMode
PLUGIN = {"CONTROLLER_SERVICE", "VOLUME_ACCESSIBILITY_CONSTRAINTS"}
CONTROLLER = {"CREATE_DELETE_VOLUME", "CREATE_DELETE_SNAPSHOT", "CLONE_VOLUME", "MODIFY_VOLUME"}
SNAPSHOT_SOURCE = {"kind": "VolumeSnapshot", "name": "s", "apiGroup": "snapshot.storage.k8s.io"}


DEFAULT_CLASS = make_class()


def plan(
    claim: dict[str, Any] | None = None,
    storage_class: dict[str, Any] | None = DEFAULT_CLASS,
    *,
    options: ProvisionerOptions | None = None,
    plugin: set[str] = PLUGIN,
    controller: set[str] = CONTROLLER,
) -> requests.RequestPlan:
    return requests.plan_request(
        claim if claim is not None else make_claim(),
        storage_class,
        options=options or ProvisionerOptions(),
        plugin_capabilities=plugin,
        controller_capabilities=controller,
    )


def test_plan_of_a_plain_claim() -> None:
    result = plan(
        make_claim(storage="1.5Gi", access_modes=["ReadWriteOnce", "ReadOnlyMany"]),
        make_class(parameters={"csi.storage.k8s.io/fstype": "xfs"}, mount_options=["noatime"]),
    )
    mount = csi.VolumeCapabilityMountVolume(fs_type="xfs", mount_flags=["noatime"])
    assert result == requests.RequestPlan(
        volume_name=PV_NAME,
        data_source=None,
        source_kind=None,
        volume_attributes_class="",
        fs_type="xfs",
        block=False,
        required_bytes=1610612736,
        volume_capabilities=(
            csi.VolumeCapability(
                mount=mount,
                access_mode=csi.VolumeCapabilityAccessMode(mode=Mode.SINGLE_NODE_WRITER),
            ),
            csi.VolumeCapability(
                mount=mount,
                access_mode=csi.VolumeCapabilityAccessMode(mode=Mode.MULTI_NODE_READER_ONLY),
            ),
        ),
    )


@pytest.mark.parametrize(
    ("kwargs", "check"),
    [
        pytest.param(
            {"claim": make_claim(spec={"volumeMode": "Block"})},
            lambda p: p.block and p.volume_capabilities[0].block is not None,
            id="block claim -> block capability",
        ),
        pytest.param(
            {"controller": CONTROLLER | {"SINGLE_NODE_MULTI_WRITER"}},
            lambda p: p.volume_capabilities[0].access_mode.mode == Mode.SINGLE_NODE_MULTI_WRITER,
            id="snmw driver -> RWO as multi writer",
        ),
        pytest.param(
            {"options": ProvisionerOptions(default_fstype="ext4")},
            lambda p: p.fs_type == "ext4",
            id="default fstype -> used",
        ),
        pytest.param(
            {"options": ProvisionerOptions(volume_name_prefix="vol", volume_name_uuid_length=8)},
            lambda p: p.volume_name == "vol-6a2b1c3d",
            id="name options -> applied",
        ),
        pytest.param(
            {"claim": make_claim(storage=None)},
            lambda p: p.required_bytes == 0,
            id="no size -> 0 bytes",
        ),
        pytest.param(
            {"claim": make_claim(spec={"dataSource": SNAPSHOT_SOURCE})},
            lambda p: p.source_kind is SourceKind.SNAPSHOT,
            id="snapshot source -> restore",
        ),
        pytest.param(
            {
                "claim": make_claim(
                    spec={"dataSource": {"kind": "PersistentVolumeClaim", "name": "a"}}
                )
            },
            lambda p: p.source_kind is SourceKind.CLONE,
            id="pvc source -> clone",
        ),
        pytest.param(
            {"claim": make_claim(spec={"volumeAttributesClassName": "gold"})},
            lambda p: p.volume_attributes_class == "gold",
            id="vac -> remembered",
        ),
    ],
)
def test_plan_details(kwargs: dict[str, Any], check: Any) -> None:
    assert check(plan(**kwargs))


NO_SNAPSHOTS = CONTROLLER - {"CREATE_DELETE_SNAPSHOT"}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        pytest.param({"storage_class": None}, "storage class was nil", id="no class -> nil class"),
        pytest.param(
            {"plugin": set()},
            "CSI driver does not support dynamic provisioning: plugin CONTROLLER_SERVICE "
            "capability is not reported",
            id="no controller service -> unsupported",
        ),
        pytest.param(
            {"controller": set()},
            "CSI driver does not support dynamic provisioning: controller CREATE_DELETE_VOLUME "
            "capability is not reported",
            id="no create/delete -> unsupported",
        ),
        pytest.param(
            {"claim": make_claim(spec={"dataSource": SNAPSHOT_SOURCE}), "controller": NO_SNAPSHOTS},
            "CSI driver does not support snapshot restore: controller CREATE_DELETE_SNAPSHOT "
            "capability is not reported",
            id="restore without snapshots -> unsupported",
        ),
        pytest.param(
            {
                "claim": make_claim(
                    spec={"dataSource": {"kind": "PersistentVolumeClaim", "name": "a"}}
                ),
                "controller": CONTROLLER - {"CLONE_VOLUME"},
            },
            "CSI driver does not support clone operations: controller CLONE_VOLUME capability is "
            "not reported",
            id="clone without cloning -> unsupported",
        ),
        pytest.param(
            {
                "claim": make_claim(spec={"volumeAttributesClassName": "gold"}),
                "controller": CONTROLLER - {"MODIFY_VOLUME"},
            },
            "CSI driver does not support VolumeAttributesClass: controller MODIFY_VOLUME "
            "capability is not reported",
            id="vac without modify -> unsupported",
        ),
        pytest.param(
            {"claim": make_claim(spec={"selector": {"matchLabels": {"a": "b"}}})},
            "claim Selector is not supported",
            id="selector -> not supported",
        ),
        pytest.param(
            {
                "claim": make_claim(spec={"selector": {}, "dataSource": SNAPSHOT_SOURCE}),
                "controller": NO_SNAPSHOTS,
            },
            "CSI driver does not support snapshot restore: controller CREATE_DELETE_SNAPSHOT "
            "capability is not reported",
            id="selector and missing capability -> capability first",
        ),
        pytest.param(
            {"claim": make_claim(uid="")},
            "corrupted PVC object, it is missing UID",
            id="no uid -> corrupted",
        ),
        pytest.param(
            {
                "storage_class": make_class(
                    parameters={"fstype": "a", "csi.storage.k8s.io/fstype": "b"}
                )
            },
            'fstype specified in parameters with both "fstype" and "csi.storage.k8s.io/fstype" '
            "keys",
            id="two fstypes -> error",
        ),
        pytest.param(
            {"claim": make_claim(storage="1Gb")},
            "quantities must match the regular expression "
            "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
            id="bad size -> quantity error",
        ),
        pytest.param(
            {"claim": make_claim(access_modes=["Sometimes"])},
            "unsupported AccessMode combination: [Sometimes]",
            id="unknown access mode -> error",
        ),
    ],
)
def test_plan_errors_are_final(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ProvisioningError) as info:
        plan(**kwargs)
    assert (str(info.value), info.value.state) == (message, ProvisioningState.FINISHED)


def test_populator_is_ignored_before_capabilities_are_checked() -> None:
    claim = make_claim(spec={"dataSourceRef": {"kind": "Bucket", "name": "b", "apiGroup": "x.io"}})
    with pytest.raises(IgnoredError):
        plan(claim, controller=set())


def build(
    *,
    claim: dict[str, Any] | None = None,
    storage_class: dict[str, Any] | None = None,
    options: ProvisionerOptions | None = None,
    **kwargs: Any,
) -> csi.CreateVolumeRequest:
    claim = claim if claim is not None else make_claim()
    storage_class = (
        storage_class
        if storage_class is not None
        else make_class(
            parameters={
                "type": "ssd",
                "csi.storage.k8s.io/provisioner-secret-name": "s",
                "csi.storage.k8s.io/provisioner-secret-namespace": "n",
            }
        )
    )
    options = options or ProvisionerOptions()
    the_plan = plan(claim, storage_class, options=options)
    return requests.build_create_request(
        the_plan,
        claim=claim,
        storage_class=storage_class,
        options=options,
        driver_name=DRIVER,
        **kwargs,
    )


def test_build_create_request() -> None:
    content = csi.VolumeContentSource(volume=csi.VolumeContentSourceVolumeSource(volume_id="v"))
    topology = csi.TopologyRequirement(requisite=[csi.Topology(segments={"z": "a"})])
    request = build(
        secrets={"token": "t"}, content_source=content, accessibility_requirements=topology
    )
    assert request == csi.CreateVolumeRequest(
        name=PV_NAME,
        capacity_range=csi.CapacityRange(required_bytes=2**30),
        volume_capabilities=[
            csi.VolumeCapability(
                mount=csi.VolumeCapabilityMountVolume(),
                access_mode=csi.VolumeCapabilityAccessMode(mode=Mode.SINGLE_NODE_WRITER),
            )
        ],
        parameters={"type": "ssd"},
        secrets={"token": "t"},
        volume_content_source=content,
        accessibility_requirements=topology,
    )
    assert request.capacity_range is not None
    assert request.capacity_range.limit_bytes == 0


def test_build_with_extra_metadata() -> None:
    request = build(options=ProvisionerOptions(extra_create_metadata=True))
    assert request.parameters == {
        "type": "ssd",
        "csi.storage.k8s.io/pvc/name": "data",
        "csi.storage.k8s.io/pvc/namespace": "default",
        "csi.storage.k8s.io/pv/name": PV_NAME,
    }


def test_build_with_volume_attributes_class() -> None:
    claim = make_claim(spec={"volumeAttributesClassName": "gold"})
    vac = {"metadata": {"name": "gold"}, "driverName": DRIVER, "parameters": {"iops": "3000"}}
    assert build(claim=claim, volume_attributes_class=vac).mutable_parameters == {"iops": "3000"}


def test_volume_attributes_class_of_another_driver_is_final() -> None:
    claim = make_claim(spec={"volumeAttributesClassName": "gold"})
    vac = {"metadata": {"name": "gold"}, "driverName": "other.csi", "parameters": {}}
    with pytest.raises(ProvisioningError) as info:
        build(claim=claim, volume_attributes_class=vac)
    assert info.value.final
    assert str(info.value) == (
        "VAC gold referenced in PVC is for driver other.csi which does not match driver name "
        f"{DRIVER}"
    )


def test_volume_attributes_class_must_be_read_first() -> None:
    with pytest.raises(ValueError, match="must be read first"):
        build(claim=make_claim(spec={"volumeAttributesClassName": "gold"}))


def test_unknown_reserved_parameter_fails_at_build_time() -> None:
    storage_class = make_class(parameters={"csi.storage.k8s.io/typo": "x"})
    with pytest.raises(
        ProvisioningError, match=r'found unknown parameter key "csi\.storage\.k8s\.io/typo"'
    ) as info:
        build(storage_class=storage_class)
    assert info.value.final
