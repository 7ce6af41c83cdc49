"""The PV made from a created volume, field for field, and the checks of CreateVolume's answer.

We test these aspects:
- the whole PV of a typical claim: name, annotations, finalizer, claimRef, capacity, CSI source
  (handle, attributes with our identity, fsType), policy, mount options, class, affinity;
- capacity from the response, or the request when the driver says 0 (unknown);
- fsType only for filesystems; readOnly only for a ROX-only claim with the option on;
- the five secret refs, the deletion-secret annotations (empty when none), the modify ones;
- volumeMode, VolumeAttributesClass and nodeAffinity only when they apply;
- a too-small volume or a missing content source: an in-background error with Go's text.
"""

from __future__ import annotations

from typing import Any

import pytest

from kopf_csi.csi import messages as csi
from kopf_csi.provisioning import requests, volumes
from kopf_csi.provisioning.options import ProvisionerOptions
from kopf_csi.provisioning.secrets import SecretRef, SecretReferences
from kopf_csi.provisioning.states import ProvisioningState

from .factories import DRIVER, PV_NAME, UID, make_claim, make_class

IDENTITY = "1700000000000-42-hostpath.csi.k8s.io"
ZONE = "topology.hostpath.csi/zone"
ALL_CAPS = {"CREATE_DELETE_VOLUME", "CLONE_VOLUME", "CREATE_DELETE_SNAPSHOT", "MODIFY_VOLUME"}


def build(
    *,
    claim: dict[str, Any] | None = None,
    storage_class: dict[str, Any] | None = None,
    volume: csi.Volume | None = None,
    secrets: SecretReferences | None = None,
    options: ProvisionerOptions | None = None,
    supports_topology: bool = True,
) -> dict[str, Any]:
    claim = claim if claim is not None else make_claim()
    storage_class = (
        storage_class
        if storage_class is not None
        else make_class(parameters={"csi.storage.k8s.io/fstype": "ext4"}, mount_options=["noatime"])
    )
    options = options or ProvisionerOptions()
    plan = requests.plan_request(
        claim,
        storage_class,
        options=options,
        plugin_capabilities={"CONTROLLER_SERVICE"},
        controller_capabilities=ALL_CAPS,
    )
    return volumes.build_volume(
        claim=claim,
        storage_class=storage_class,
        plan=plan,
        volume=volume or csi.Volume(volume_id="vol-1", capacity_bytes=2**30),
        secrets=secrets or SecretReferences(),
        driver_name=DRIVER,
        identity=IDENTITY,
        options=options,
        supports_topology=supports_topology,
    )


def test_typical_volume() -> None:
    volume = csi.Volume(
        volume_id="vol-1",
        capacity_bytes=2 * 2**30,
        volume_context={"pool": "a"},
        accessible_topology=[csi.Topology(segments={ZONE: "a"})],
    )
    assert build(volume=volume) == {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {
            "name": PV_NAME,
            "annotations": {
                "pv.kubernetes.io/provisioned-by": DRIVER,
                "volume.kubernetes.io/provisioner-deletion-secret-name": "",
                "volume.kubernetes.io/provisioner-deletion-secret-namespace": "",
            },
            "finalizers": ["external-provisioner.volume.kubernetes.io/finalizer"],
        },
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "capacity": {"storage": "2Gi"},
            "csi": {
                "driver": DRIVER,
                "volumeHandle": "vol-1",
                "volumeAttributes": {
                    "storage.kubernetes.io/csiProvisionerIdentity": IDENTITY,
                    "pool": "a",
                },
                "fsType": "ext4",
            },
            "claimRef": {
                "kind": "PersistentVolumeClaim",
                "namespace": "default",
                "name": "data",
                "uid": UID,
                "apiVersion": "v1",
                "resourceVersion": "42",
            },
            "storageClassName": "fast",
            "mountOptions": ["noatime"],
            "persistentVolumeReclaimPolicy": "Delete",
            "nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["a"]}]}
                    ]
                }
            },
        },
    }


@pytest.mark.parametrize(
    ("kwargs", "path", "expected"),
    [
        pytest.param(
            {"volume": csi.Volume(volume_id="v", capacity_bytes=0)},
            "spec.capacity.storage",
            "1Gi",
            id="capacity 0 -> the request",
        ),
        pytest.param(
            {"volume": csi.Volume(volume_id="v", capacity_bytes=1536 * 2**20)},
            "spec.capacity.storage",
            "1536Mi",
            id="capacity -> canonical BinarySI",
        ),
        pytest.param(
            {"claim": make_claim(storage="1500M"), "volume": csi.Volume(volume_id="v")},
            "spec.capacity.storage",
            "1500000000",
            id="decimal request echoed -> bytes",
        ),
        pytest.param(
            {
                "volume": csi.Volume(
                    volume_id="v",
                    volume_context={"storage.kubernetes.io/csiProvisionerIdentity": "driver's"},
                )
            },
            "spec.csi.volumeAttributes",
            {"storage.kubernetes.io/csiProvisionerIdentity": "driver's"},
            id="driver context key -> overrides identity, as Go",
        ),
        pytest.param(
            {"claim": make_claim(spec={"volumeMode": "Block"})},
            "spec.csi.fsType",
            None,
            id="block -> no fsType",
        ),
        pytest.param(
            {"claim": make_claim(spec={"volumeMode": "Block"})},
            "spec.volumeMode",
            "Block",
            id="block -> volumeMode copied",
        ),
        pytest.param(
            {"claim": make_claim(spec={"volumeMode": "Filesystem"})},
            "spec.volumeMode",
            "Filesystem",
            id="filesystem -> volumeMode copied",
        ),
        pytest.param({}, "spec.volumeMode", None, id="no volumeMode -> none"),
        pytest.param(
            {"storage_class": make_class()}, "spec.csi.fsType", None, id="no fstype -> no fsType"
        ),
        pytest.param(
            {"storage_class": make_class()},
            "spec.mountOptions",
            None,
            id="no mount options -> none",
        ),
        pytest.param(
            {"storage_class": make_class(reclaim=None)},
            "spec.persistentVolumeReclaimPolicy",
            None,
            id="class without policy -> none",
        ),
        pytest.param(
            {"storage_class": make_class(reclaim="Retain")},
            "spec.persistentVolumeReclaimPolicy",
            "Retain",
            id="retain class -> retain",
        ),
        pytest.param(
            {"storage_class": make_class(provisioner="kubernetes.io/gce-pd")},
            ("metadata", "annotations", "pv.kubernetes.io/provisioned-by"),
            "kubernetes.io/gce-pd",
            id="provisioned-by -> the class provisioner",
        ),
        pytest.param(
            {
                "claim": make_claim(access_modes=["ReadOnlyMany"]),
                "options": ProvisionerOptions(controller_publish_readonly=True),
            },
            "spec.csi.readOnly",
            True,
            id="ROX only with option -> readOnly",
        ),
        pytest.param(
            {"claim": make_claim(access_modes=["ReadOnlyMany"])},
            "spec.csi.readOnly",
            None,
            id="ROX without option -> writable",
        ),
        pytest.param(
            {
                "claim": make_claim(access_modes=["ReadOnlyMany", "ReadWriteOnce"]),
                "options": ProvisionerOptions(controller_publish_readonly=True),
            },
            "spec.csi.readOnly",
            None,
            id="ROX and RWO with option -> writable",
        ),
        pytest.param(
            {"claim": make_claim(spec={"volumeAttributesClassName": "gold"})},
            "spec.volumeAttributesClassName",
            "gold",
            id="vac -> named on the PV",
        ),
        pytest.param(
            {
                "volume": csi.Volume(
                    volume_id="v", accessible_topology=[csi.Topology(segments={ZONE: "a"})]
                ),
                "supports_topology": False,
            },
            "spec.nodeAffinity",
            None,
            id="topology unsupported -> no affinity",
        ),
        pytest.param(
            {"volume": csi.Volume(volume_id="v")},
            "spec.nodeAffinity",
            None,
            id="no accessible topology -> no affinity",
        ),
        pytest.param(
            {"claim": make_claim(annotations={"volume.beta.kubernetes.io/storage-class": "old"})},
            "spec.storageClassName",
            "old",
            id="beta class annotation -> storageClassName",
        ),
    ],
)
def test_volume_fields(kwargs: dict[str, Any], path: str | tuple[str, ...], expected: Any) -> None:
    value: Any = build(**kwargs)
    for part in path if isinstance(path, tuple) else path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    assert value == expected


def test_secret_references_on_the_volume() -> None:
    secrets = SecretReferences(
        provisioner=SecretRef("prov", "ns1"),
        controller_publish=SecretRef("cp", "ns2"),
        node_stage=SecretRef("st", "ns3"),
        node_publish=SecretRef("np", "ns4"),
        controller_expand=SecretRef("ce", "ns5"),
        node_expand=SecretRef("ne", "ns6"),
        controller_modify=SecretRef("cm", "ns7"),
    )
    pv = build(secrets=secrets)
    assert pv["metadata"]["annotations"] == {
        "pv.kubernetes.io/provisioned-by": DRIVER,
        "volume.kubernetes.io/provisioner-deletion-secret-name": "prov",
        "volume.kubernetes.io/provisioner-deletion-secret-namespace": "ns1",
        "volume.kubernetes.io/controller-modify-secret-name": "cm",
        "volume.kubernetes.io/controller-modify-secret-namespace": "ns7",
    }
    source = pv["spec"]["csi"]
    assert {k: v for k, v in source.items() if k.endswith("SecretRef")} == {
        "controllerPublishSecretRef": {"name": "cp", "namespace": "ns2"},
        "nodeStageSecretRef": {"name": "st", "namespace": "ns3"},
        "nodePublishSecretRef": {"name": "np", "namespace": "ns4"},
        "controllerExpandSecretRef": {"name": "ce", "namespace": "ns5"},
        "nodeExpandSecretRef": {"name": "ne", "namespace": "ns6"},
    }


CLONE_CLAIM = make_claim(spec={"dataSource": {"kind": "PersistentVolumeClaim", "name": "src"}})
SOURCE = csi.VolumeContentSource(volume=csi.VolumeContentSourceVolumeSource(volume_id="s"))


@pytest.mark.parametrize(
    ("volume", "claim", "message"),
    [
        pytest.param(
            csi.Volume(volume_id="v", capacity_bytes=2**30),
            make_claim(),
            None,
            id="exact size -> fine",
        ),
        pytest.param(
            csi.Volume(volume_id="v", capacity_bytes=0),
            make_claim(),
            None,
            id="unknown size -> fine",
        ),
        pytest.param(
            csi.Volume(volume_id="v", capacity_bytes=2**31), make_claim(), None, id="bigger -> fine"
        ),
        pytest.param(
            csi.Volume(volume_id="v", capacity_bytes=1000),
            make_claim(),
            "created volume capacity 1000 less than requested capacity 1073741824",
            id="smaller -> problem",
        ),
        pytest.param(
            csi.Volume(volume_id="v"),
            CLONE_CLAIM,
            "volume content source missing",
            id="clone without content source -> problem",
        ),
        pytest.param(
            csi.Volume(volume_id="v", content_source=SOURCE),
            CLONE_CLAIM,
            None,
            id="clone with content source -> fine",
        ),
    ],
)
def test_response_problem(volume: csi.Volume, claim: dict[str, Any], message: str | None) -> None:
    problem = volumes.response_problem(volume, claim=claim, required_bytes=2**30)
    assert (problem.message if problem else None) == message


@pytest.mark.parametrize(
    ("volume", "claim", "cleanup_error", "message"),
    [
        pytest.param(
            csi.Volume(volume_id="v", capacity_bytes=1),
            make_claim(),
            None,
            "created volume capacity 1 less than requested capacity 1073741824",
            id="small, cleaned up -> plain",
        ),
        pytest.param(
            csi.Volume(volume_id="v", capacity_bytes=1),
            make_claim(),
            "boom",
            "created volume capacity 1 less than requested capacity 1073741824. Cleanup of volume "
            f"{PV_NAME} failed, volume is orphaned: boom",
            id="small, cleanup failed -> Cleanup orphan",
        ),
        pytest.param(
            csi.Volume(volume_id="v"),
            CLONE_CLAIM,
            "boom",
            f"volume content source missing. cleanup of volume {PV_NAME} failed, volume is "
            "orphaned: boom",
            id="no source, cleanup failed -> cleanup orphan",
        ),
    ],
)
def test_response_problem_error(
    volume: csi.Volume, claim: dict[str, Any], cleanup_error: str | None, message: str
) -> None:
    problem = volumes.response_problem(volume, claim=claim, required_bytes=2**30)
    assert problem is not None
    error = problem.error(volume_name=PV_NAME, cleanup_error=cleanup_error)
    assert (str(error), error.state) == (message, ProvisioningState.IN_BACKGROUND)


def test_claim_reference_omits_empty_fields() -> None:
    claim = {"metadata": {"name": "c", "namespace": "ns", "uid": "u"}}
    assert volumes.claim_reference(claim) == {
        "kind": "PersistentVolumeClaim",
        "namespace": "ns",
        "name": "c",
        "uid": "u",
        "apiVersion": "v1",
    }
