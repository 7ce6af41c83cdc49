"""Provisioning end to end: a claim becomes a volume on the driver and a PV in the API.

We test these aspects:
- an Immediate claim gets a PV with every field the Go sidecar writes, and the events
  Provisioning and ProvisioningSucceeded with the reference's messages;
- a WaitForFirstConsumer claim waits for a selected node, then is provisioned there;
- filesystem and block volumes: mount or block capabilities at the driver, volumeMode on the PV;
- every access mode reaches the driver as the csi-lib-utils mapping says, with and without
  SINGLE_NODE_MULTI_WRITER, one capability per mode, and is copied to the PV;
- the fstype (`csi.storage.k8s.io/fstype`, the deprecated `fstype`, `--default-fstype`) and
  the mount options reach the driver and the PV; reserved parameters are stripped;
- the capacity is passed in bytes, exactly, and the PV gets the driver's capacity;
- `--extra-create-metadata` adds the claim's and PV's names to the parameters;
- `--controller-publish-readonly` makes the PV of a ReadOnlyMany-only claim read-only;
- nothing of kopf's (annotations, finalizers) ever lands on users' claims;
- many claims are provisioned in parallel, each exactly once.
"""

from __future__ import annotations

import dataclasses

import pytest

from kopf_csi import names
from kopf_csi.driver import Driver, DriverConfig
from kopf_csi.driver.volumes import VolumeRequest
from kopf_csi.settings import ProvisionerOptions
from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.kcm import FINALIZER_PV_PROTECTION as PV_PROTECTION
from kopf_csi.testing.kcm import FINALIZER_PVC_PROTECTION as PVC_PROTECTION
from kopf_csi.testing.operator import OperatorThread
from kopf_csi.testing.spies import Calls

from ..conftest import DRIVER_NAME, NODE
from .conftest import (
    NAMESPACE,
    NODE_2,
    RETRY_MAX,
    RETRY_START,
    TOPOLOGY_KEY,
    assert_stays,
    drain,
    events_for,
    make_claim,
    make_pod,
    make_storage_class,
    volume_name,
    wait_for_bound,
    wait_for_event,
)

pytestmark = pytest.mark.usefixtures("kcm")


async def test_immediate_claim_gets_a_pv_with_every_reference_field(
    cluster: EmulatedCluster, operator: OperatorThread, created: list[VolumeRequest]
) -> None:
    await make_storage_class(cluster, operator, mount_options=["noatime"])
    claim = make_claim(cluster, size="3Mi")
    pv = await wait_for_bound(cluster, claim)

    meta, spec = pv["metadata"], pv["spec"]
    assert meta["name"] == volume_name(claim)
    assert meta["annotations"] == {
        names.ANN_PROVISIONED_BY: DRIVER_NAME,
        names.ANN_DELETION_SECRET_NAME: "",
        names.ANN_DELETION_SECRET_NAMESPACE: "",
    }
    assert meta["finalizers"] == [names.FINALIZER_PV, PV_PROTECTION]
    assert spec["claimRef"] == {
        "kind": "PersistentVolumeClaim",
        "namespace": NAMESPACE,
        "name": "data",
        "uid": claim["metadata"]["uid"],
        "apiVersion": "v1",
        "resourceVersion": spec["claimRef"]["resourceVersion"],
    }
    assert spec["accessModes"] == ["ReadWriteOnce"]
    assert spec["capacity"] == {"storage": "3Mi"}
    assert spec["storageClassName"] == "sc"
    assert spec["persistentVolumeReclaimPolicy"] == "Delete"
    assert spec["mountOptions"] == ["noatime"]
    assert "volumeMode" not in spec  # not set on the claim, so not on the PV
    (request,) = created
    csi = spec["csi"]
    assert csi["driver"] == DRIVER_NAME
    assert request.name == meta["name"]
    identity = csi["volumeAttributes"][names.PROVISIONER_IDENTITY_KEY]
    millis, rand4, driver = identity.split("-", 2)
    assert millis.isdigit()
    assert rand4.isdigit()
    assert driver == DRIVER_NAME
    assert set(csi) == {"driver", "volumeHandle", "volumeAttributes"}  # no fsType, no secrets


async def test_immediate_claim_posts_the_reference_events(
    cluster: EmulatedCluster, operator: OperatorThread
) -> None:
    await make_storage_class(cluster, operator)
    claim = make_claim(cluster)
    pv = await wait_for_bound(cluster, claim)
    await wait_for_event(cluster, claim, names.REASON_PROVISIONING_SUCCEEDED)

    ours = [
        (e["type"], e["reason"], e["message"])
        for e in events_for(cluster, claim)
        if e["source"]["component"] != "persistentvolume-controller"
    ]
    assert ours == [
        ("Normal", "Provisioning",
         'External provisioner is provisioning volume for claim "default/data"'),
        ("Normal", "ProvisioningSucceeded",
         f"Successfully provisioned volume {pv['metadata']['name']}"),
    ]  # fmt: skip
    component = events_for(cluster, claim, names.REASON_PROVISIONING)[0]["source"]["component"]
    assert component.startswith(f"{DRIVER_NAME}_")  # the library's `<driver>_<host>_<uuid>`


async def test_driver_volume_is_the_one_on_the_pv(
    cluster: EmulatedCluster, operator: OperatorThread, driver: Driver
) -> None:
    await make_storage_class(cluster, operator)
    claim = make_claim(cluster)
    pv = await wait_for_bound(cluster, claim)

    volumes = driver.state.volumes
    (backend,) = volumes.values()
    assert backend.name == volume_name(claim)  # the CSI name is the PV name: the idempotency key
    assert pv["spec"]["csi"]["volumeHandle"] == backend.volume_id


async def test_wait_for_first_consumer_waits_for_a_selected_node(
    cluster: EmulatedCluster, operator: OperatorThread, calls: Calls, created: list[VolumeRequest]
) -> None:
    await make_storage_class(cluster, operator, binding="WaitForFirstConsumer")
    claim = make_claim(cluster)
    await wait_for_event(cluster, claim, "WaitForFirstConsumer")
    await assert_stays(
        lambda: calls.count("CreateVolume") == 0 and not cluster.objects("persistentvolumes"),
        duration=4 * RETRY_START,
    )

    make_pod(cluster, "app", "data", node=NODE_2)
    pv = await wait_for_bound(cluster, claim)

    (request,) = created
    assert request.preferred[0] == {TOPOLOGY_KEY: NODE_2}  # the selected node first
    affinity = pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
    assert affinity == [
        {"matchExpressions": [{"key": TOPOLOGY_KEY, "operator": "In", "values": [NODE_2]}]}
    ]
    current = cluster.get("persistentvolumeclaims", NAMESPACE, "data")
    assert current is not None
    assert current["metadata"]["annotations"][names.ANN_SELECTED_NODE] == NODE_2


async def test_filesystem_claim_gets_a_mount_volume(
    cluster: EmulatedCluster, operator: OperatorThread, created: list[VolumeRequest]
) -> None:
    await make_storage_class(cluster, operator)
    claim = make_claim(cluster, volume_mode="Filesystem")
    pv = await wait_for_bound(cluster, claim)

    (request,) = created
    assert [c.block for c in request.capabilities] == [False]
    assert pv["spec"]["volumeMode"] == "Filesystem"


async def test_block_claim_gets_a_block_volume_without_fstype(
    cluster: EmulatedCluster, operator: OperatorThread, created: list[VolumeRequest], driver: Driver
) -> None:
    parameters = {names.PARAM_FSTYPE: "ext4"}
    await make_storage_class(cluster, operator, parameters=parameters, mount_options=["ro"])
    claim = make_claim(cluster, volume_mode="Block")
    pv = await wait_for_bound(cluster, claim)

    (request,) = created
    (capability,) = request.capabilities
    assert capability.block
    assert capability.fs_type == ""
    assert capability.mount_flags == ()
    assert pv["spec"]["volumeMode"] == "Block"
    assert "fsType" not in pv["spec"]["csi"]  # only non-block volumes get one
    (backend,) = driver.state.volumes.values()
    assert backend.block


MODES_WITH_MULTI_WRITER = [
    ("ReadWriteOnce", "SINGLE_NODE_MULTI_WRITER"),
    ("ReadOnlyMany", "MULTI_NODE_READER_ONLY"),
    ("ReadWriteMany", "MULTI_NODE_MULTI_WRITER"),
    ("ReadWriteOncePod", "SINGLE_NODE_SINGLE_WRITER"),
]
MODES_WITHOUT_MULTI_WRITER = [
    ("ReadWriteOnce", "SINGLE_NODE_WRITER"),
    ("ReadOnlyMany", "MULTI_NODE_READER_ONLY"),
    ("ReadWriteMany", "MULTI_NODE_MULTI_WRITER"),
    ("ReadWriteOncePod", "SINGLE_NODE_WRITER"),
]


@pytest.mark.parametrize(("access_mode", "csi_mode"), MODES_WITH_MULTI_WRITER)
async def test_access_mode_reaches_the_driver_with_single_node_multi_writer(
    cluster: EmulatedCluster,
    operator: OperatorThread,
    created: list[VolumeRequest],
    access_mode: str,
    csi_mode: str,
) -> None:
    await make_storage_class(cluster, operator)
    claim = make_claim(cluster, access_modes=[access_mode])
    pv = await wait_for_bound(cluster, claim)

    (request,) = created
    assert [c.access_mode for c in request.capabilities] == [csi_mode]
    assert pv["spec"]["accessModes"] == [access_mode]


class TestWithoutSingleNodeMultiWriter:
    @pytest.fixture
    def driver_config(self, driver_config: DriverConfig) -> DriverConfig:
        features = dataclasses.replace(driver_config.features, single_node_multi_writer=False)
        return dataclasses.replace(driver_config, features=features)

    @pytest.mark.parametrize(("access_mode", "csi_mode"), MODES_WITHOUT_MULTI_WRITER)
    async def test_access_mode_reaches_the_driver_with_the_classic_modes(
        self,
        cluster: EmulatedCluster,
        operator: OperatorThread,
        created: list[VolumeRequest],
        access_mode: str,
        csi_mode: str,
    ) -> None:
        assert "SINGLE_NODE_MULTI_WRITER" not in operator.memo.driver.controller_capabilities
        await make_storage_class(cluster, operator)
        claim = make_claim(cluster, access_modes=[access_mode])
        pv = await wait_for_bound(cluster, claim)

        (request,) = created
        assert [c.access_mode for c in request.capabilities] == [csi_mode]
        assert pv["spec"]["accessModes"] == [access_mode]


async def test_several_access_modes_become_one_capability_each(
    cluster: EmulatedCluster, operator: OperatorThread, created: list[VolumeRequest]
) -> None:
    await make_storage_class(cluster, operator)
    claim = make_claim(cluster, access_modes=["ReadWriteOnce", "ReadWriteMany"])
    pv = await wait_for_bound(cluster, claim)

    (request,) = created
    modes = [c.access_mode for c in request.capabilities]
    assert modes == ["SINGLE_NODE_MULTI_WRITER", "MULTI_NODE_MULTI_WRITER"]
    assert pv["spec"]["accessModes"] == ["ReadWriteOnce", "ReadWriteMany"]


async def test_fstype_and_mount_options_reach_the_driver_and_the_pv(
    cluster: EmulatedCluster, operator: OperatorThread, created: list[VolumeRequest]
) -> None:
    parameters = {names.PARAM_FSTYPE: "xfs", "tier": "gold"}
    mount_options = ["noatime", "nodiratime"]
    await make_storage_class(cluster, operator, parameters=parameters, mount_options=mount_options)
    claim = make_claim(cluster)
    pv = await wait_for_bound(cluster, claim)

    (request,) = created
    (capability,) = request.capabilities
    assert capability.fs_type == "xfs"
    assert capability.mount_flags == ("noatime", "nodiratime")
    assert dict(request.parameters) == {"tier": "gold"}  # the reserved key is stripped
    assert pv["spec"]["csi"]["fsType"] == "xfs"
    assert pv["spec"]["mountOptions"] == mount_options


@pytest.mark.parametrize("key", ["fstype", "FsType"])
async def test_deprecated_fstype_key_is_honoured_and_passed_through(
    cluster: EmulatedCluster, operator: OperatorThread, created: list[VolumeRequest], key: str
) -> None:
    await make_storage_class(cluster, operator, parameters={key: "ext3"})
    claim = make_claim(cluster)
    pv = await wait_for_bound(cluster, claim)

    (request,) = created
    assert [c.fs_type for c in request.capabilities] == ["ext3"]
    assert dict(request.parameters) == {key: "ext3"}  # deprecated keys are not stripped
    assert pv["spec"]["csi"]["fsType"] == "ext3"


class TestDefaultFstype:
    @pytest.fixture
    def provisioner_options(self, provisioner_options: ProvisionerOptions) -> ProvisionerOptions:
        return dataclasses.replace(provisioner_options, default_fstype="ext4")

    async def test_default_fstype_applies_when_the_class_names_none(
        self, cluster: EmulatedCluster, operator: OperatorThread, created: list[VolumeRequest]
    ) -> None:
        await make_storage_class(cluster, operator)
        claim = make_claim(cluster)
        pv = await wait_for_bound(cluster, claim)

        (request,) = created
        assert [c.fs_type for c in request.capabilities] == ["ext4"]
        assert pv["spec"]["csi"]["fsType"] == "ext4"

    async def test_class_fstype_wins_over_the_default(
        self, cluster: EmulatedCluster, operator: OperatorThread, created: list[VolumeRequest]
    ) -> None:
        await make_storage_class(cluster, operator, parameters={names.PARAM_FSTYPE: "xfs"})
        claim = make_claim(cluster)
        pv = await wait_for_bound(cluster, claim)

        assert [c.fs_type for c in created[0].capabilities] == ["xfs"]
        assert pv["spec"]["csi"]["fsType"] == "xfs"


async def test_capacity_is_passed_in_exact_bytes(
    cluster: EmulatedCluster, operator: OperatorThread, created: list[VolumeRequest]
) -> None:
    await make_storage_class(cluster, operator)
    claim = make_claim(cluster, size="1500Ki")  # not a round number of MiB: no rounding
    pv = await wait_for_bound(cluster, claim)

    (request,) = created
    assert request.required == 1500 * 1024
    assert request.limit == 0  # the Go sidecar sets no limit
    assert pv["spec"]["capacity"] == {"storage": "1500Ki"}  # the driver's answer, BinarySI


class TestExtraCreateMetadata:
    @pytest.fixture
    def provisioner_options(self, provisioner_options: ProvisionerOptions) -> ProvisionerOptions:
        return dataclasses.replace(provisioner_options, extra_create_metadata=True)

    async def test_claim_and_pv_names_are_added_to_the_parameters(
        self, cluster: EmulatedCluster, operator: OperatorThread, created: list[VolumeRequest]
    ) -> None:
        await make_storage_class(cluster, operator, parameters={"tier": "gold"})
        claim = make_claim(cluster)
        pv = await wait_for_bound(cluster, claim)

        (request,) = created
        assert dict(request.parameters) == {
            "tier": "gold",
            names.PARAM_PVC_NAME: "data",
            names.PARAM_PVC_NAMESPACE: NAMESPACE,
            names.PARAM_PV_NAME: pv["metadata"]["name"],
        }


class TestControllerPublishReadonly:
    @pytest.fixture
    def provisioner_options(self, provisioner_options: ProvisionerOptions) -> ProvisionerOptions:
        return dataclasses.replace(provisioner_options, controller_publish_readonly=True)

    @pytest.mark.parametrize(
        ("access_modes", "read_only"),
        [
            (["ReadOnlyMany"], True),
            (["ReadWriteOnce"], False),
            (["ReadOnlyMany", "ReadWriteMany"], False),
        ],
    )
    async def test_only_a_rox_only_claim_gets_a_read_only_pv(
        self,
        cluster: EmulatedCluster,
        operator: OperatorThread,
        access_modes: list[str],
        read_only: bool,
    ) -> None:
        await make_storage_class(cluster, operator)
        claim = make_claim(cluster, access_modes=access_modes)
        pv = await wait_for_bound(cluster, claim)
        assert pv["spec"]["csi"].get("readOnly", False) is read_only


async def test_claims_never_get_kopf_annotations_or_finalizers(
    cluster: EmulatedCluster, operator: OperatorThread
) -> None:
    await make_storage_class(cluster, operator)
    await make_storage_class(cluster, operator, "bad", parameters={"csi.storage.k8s.io/foo": "x"})
    with cluster.subscribe("persistentvolumeclaims") as feed:
        good = make_claim(cluster, "good")
        bad = make_claim(cluster, "bad", storage_class="bad")
        await wait_for_bound(cluster, good)
        await wait_for_event(cluster, bad, names.REASON_PROVISIONING_FAILED)
        cluster.delete("persistentvolumeclaims", NAMESPACE, "good")
        await wait_for_event(cluster, bad, names.REASON_PROVISIONING_FAILED, timeout=RETRY_MAX)
        changes = await drain(feed)

    assert changes
    for change in changes:
        meta = change.object["metadata"]
        assert meta.get("finalizers") == [PVC_PROTECTION], change  # the admission's only
        assert not [key for key in meta.get("annotations") or {} if "kopf" in key], change


async def test_many_claims_are_provisioned_in_parallel_each_once(
    cluster: EmulatedCluster, operator: OperatorThread, created: list[VolumeRequest], driver: Driver
) -> None:
    await make_storage_class(cluster, operator)
    claims = [make_claim(cluster, f"data-{i}") for i in range(30)]
    for claim in claims:
        await wait_for_bound(cluster, claim)

    assert sorted(r.name for r in created) == sorted(volume_name(c) for c in claims)
    assert len(driver.state.volumes) == 30
    assert len(cluster.objects("persistentvolumes")) == 30
    nodes = {
        term["matchExpressions"][0]["values"][0]
        for pv in cluster.objects("persistentvolumes")
        for term in pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
    }
    assert nodes <= {NODE, NODE_2}
