"""The hostdir example provisioner, end to end with no CSI driver at all.

kopf runs the default modules and the example with `--no-csi` against the emulated API and the
kube-controller-manager stand-in; there is no driver socket. Only the testing kit's fixtures
(`cluster`, `kcm`, `settings`, `handler_modules`) and `running_operator` are used, as a user's
suite would. We test: Immediate and WaitForFirstConsumer, Delete (the directory goes) and Retain
(it stays), `local` and `hostPath`, a reschedule when the node has no room, a final error with
its event, Block refused, a restart in the middle of provisioning (the claim kept: one PV, one
directory; the claim deleted meanwhile: nothing left behind), and two replicas with leader
election on the Go library's Lease.
"""

from __future__ import annotations

import asyncio
import dataclasses
import pathlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from kopf_csi import names, rbac
from kopf_csi.provisioning.journal import journal_name
from kopf_csi.settings import (
    CSISettings,
    LeaderElectionSettings,
    ProvisionerOptions,
    Settings,
)
from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.operator import DEFAULT_MODULES, OperatorThread, running_operator
from kopf_csi.testing.pytest_plugin import DRIVER_NAME, NODE, seed_node, until
from kopf_csi_handlers.examples.hostdir_provisioner import NAME, node_affinity, parse_parameters
from tests.examples import gate

EXAMPLE = "kopf_csi_handlers.examples.hostdir_provisioner"
GATED = "tests.examples.gated_hostdir"
NAMESPACE = "default"  # the claims'
OWN_NAMESPACE = rbac.NAMESPACE  # the operator's (its journal and Leases), under kit_rbac


@pytest.fixture
def handler_modules() -> tuple[str, ...]:
    return (*DEFAULT_MODULES, EXAMPLE)


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return dataclasses.replace(
        settings,
        csi=CSISettings(disabled=True),
        provisioner=ProvisionerOptions(
            retry_interval_start=0.05, retry_interval_max=0.3, node_name=NODE
        ),
    )


@pytest.fixture
async def operator(
    settings: Settings, handler_modules: tuple[str, ...]
) -> AsyncIterator[OperatorThread]:
    """No `driver` fixture: nothing listens on any CSI socket."""
    async with running_operator(settings=settings, modules=handler_modules) as operator:
        yield operator


@pytest.fixture(autouse=True)
def node(cluster: EmulatedCluster) -> None:
    seed_node(cluster)


@pytest.fixture
def base(tmp_path: pathlib.Path) -> pathlib.Path:
    return tmp_path / "hostdir"


def storage_class(
    cluster: EmulatedCluster,
    base: pathlib.Path,
    *,
    name: str = "hostdir",
    binding: str = "Immediate",
    policy: str = "Delete",
    **parameters: str,
) -> None:
    cluster.create(
        "storageclasses",
        {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": name},
         "provisioner": NAME, "parameters": {"basePath": str(base), **parameters},
         "reclaimPolicy": policy, "volumeBindingMode": binding},
    )  # fmt: skip


def claim(
    cluster: EmulatedCluster, name: str, *, cls: str = "hostdir", size: str = "1Mi", **spec: Any
) -> dict[str, Any]:
    return cluster.create(
        "persistentvolumeclaims",
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
         "metadata": {"name": name, "namespace": NAMESPACE},
         "spec": {"storageClassName": cls, "accessModes": ["ReadWriteOnce"],
                  "resources": {"requests": {"storage": size}}, **spec}},
    )  # fmt: skip


def select_node(cluster: EmulatedCluster, name: str, node: str = NODE) -> None:
    """What the scheduler does for a WaitForFirstConsumer claim once its pod has a node."""
    patch = {"metadata": {"annotations": {names.ANN_SELECTED_NODE: node}}}
    cluster.patch("persistentvolumeclaims", NAMESPACE, name, patch)


def bound_volume(cluster: EmulatedCluster, name: str) -> dict[str, Any] | None:
    found = cluster.get("persistentvolumeclaims", NAMESPACE, name)
    if not found or found.get("status", {}).get("phase") != "Bound":
        return None
    return cluster.get("persistentvolumes", None, found["spec"]["volumeName"])


def events_of(cluster: EmulatedCluster, name: str, reason: str) -> list[str]:
    return [
        event.get("message", "")
        for event in cluster.objects("events")
        if event.get("involvedObject", {}).get("name") == name and event.get("reason") == reason
    ]


def event_count(cluster: EmulatedCluster, name: str, reason: str) -> int:
    return sum(
        event.get("count", 1)
        for event in cluster.objects("events")
        if event.get("involvedObject", {}).get("name") == name and event.get("reason") == reason
    )


def directories(base: pathlib.Path) -> list[str]:
    return sorted(p.name for p in base.iterdir()) if base.exists() else []


def delete_claim(cluster: EmulatedCluster, name: str) -> None:
    cluster.delete("persistentvolumeclaims", NAMESPACE, name)


# -- the pure part -----------------------------------------------------------------------------


def test_parameters_are_checked() -> None:
    assert parse_parameters({}) == (pathlib.Path("/var/lib/kopf-csi-hostdir"), "local")
    assert parse_parameters({"basePath": "/d", "volumeType": "hostPath"})[1] == "hostPath"
    for bad, words in [({"size": "1"}, "'size'"), ({"volumeType": "nfs"}, "'nfs'"),
                       ({"basePath": "rel"}, "'rel'")]:  # fmt: skip
        with pytest.raises(ValueError, match=words):
            parse_parameters(bad)


# -- end to end --------------------------------------------------------------------------------


async def test_immediate_local_volume_is_made_and_deleted_with_its_directory(
    cluster: EmulatedCluster, kcm: Any, operator: OperatorThread, base: pathlib.Path
) -> None:
    storage_class(cluster, base)
    uid = claim(cluster, "data")["metadata"]["uid"]
    volume = await until(lambda: bound_volume(cluster, "data"))
    name = f"pvc-{uid}"
    assert volume["metadata"]["name"] == name
    assert volume["metadata"]["annotations"][names.ANN_PROVISIONED_BY] == NAME
    assert names.FINALIZER_PV in volume["metadata"]["finalizers"]
    assert volume["spec"]["local"] == {"path": str(base / name)}
    terms = volume["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
    assert terms[0]["matchExpressions"][0]["values"] == [NODE]
    assert volume["spec"]["persistentVolumeReclaimPolicy"] == "Delete"
    assert volume["spec"]["capacity"] == {"storage": "1Mi"}
    assert volume["spec"]["claimRef"]["uid"] == uid
    assert directories(base) == [name]
    # The event follows the PV's creation, and the binder may bind the claim before it lands.
    succeeded = await until(lambda: events_of(cluster, "data", "ProvisioningSucceeded"))
    assert succeeded == [f"Successfully provisioned volume {name}"]
    managers = {entry["manager"] for entry in volume["metadata"]["managedFields"]}
    assert "kopf-csi.kopf.dev-hostdir" in managers  # its own field manager, not csi-provisioner
    delete_claim(cluster, "data")
    await until(lambda: cluster.get("persistentvolumes", None, name) is None)
    assert directories(base) == []
    assert operator.memo.get("provisioner") is None  # no CSI controller ran
    assert operator.error is None


async def test_wait_for_first_consumer_hostpath_kept_on_retain(
    cluster: EmulatedCluster, kcm: Any, operator: OperatorThread, base: pathlib.Path
) -> None:
    storage_class(
        cluster, base, binding="WaitForFirstConsumer", policy="Retain", volumeType="hostPath"
    )
    uid = claim(cluster, "late")["metadata"]["uid"]
    await until(lambda: events_of(cluster, "late", "WaitForFirstConsumer"))
    assert directories(base) == []  # no node yet: nothing made
    select_node(cluster, "late")
    volume = await until(lambda: bound_volume(cluster, "late"))
    assert volume["spec"]["hostPath"] == {"path": str(base / f"pvc-{uid}"), "type": "Directory"}
    # Retain: the finalizer it was created with goes (Go's handleProtectionFinalizer), which
    # may be after the claim is Bound.
    await until(
        lambda: (
            names.FINALIZER_PV
            not in cluster.get("persistentvolumes", None, f"pvc-{uid}")["metadata"]["finalizers"]
        )
    )
    delete_claim(cluster, "late")
    released = await until(
        lambda: (
            (pv := cluster.get("persistentvolumes", None, f"pvc-{uid}"))
            and pv.get("status", {}).get("phase") == "Released"
        )
    )
    assert released
    assert directories(base) == [f"pvc-{uid}"]  # kept, with its PV


async def test_a_node_without_room_reschedules_the_claim(
    cluster: EmulatedCluster, kcm: Any, operator: OperatorThread, base: pathlib.Path
) -> None:
    storage_class(cluster, base, binding="WaitForFirstConsumer")
    claim(cluster, "huge", size="1Pi")
    select_node(cluster, "huge")
    failures = await until(lambda: events_of(cluster, "huge", "ProvisioningFailed"))
    assert f"node {NODE} has" in failures[0]
    assert failures[0].endswith(f"the claim asks for {2**50}")
    await until(
        lambda: (
            names.ANN_SELECTED_NODE
            not in cluster.get("persistentvolumeclaims", NAMESPACE, "huge")["metadata"].get(
                "annotations", {}
            )
        )
    )
    assert cluster.objects("persistentvolumes") == []
    assert directories(base) == []


async def test_a_bad_parameter_is_a_final_error_with_its_event(
    cluster: EmulatedCluster, kcm: Any, operator: OperatorThread, base: pathlib.Path
) -> None:
    storage_class(cluster, base, volumeType="nfs")
    storage_class(cluster, base, name="plain")
    claim(cluster, "wrong")
    claim(cluster, "block", cls="plain", volumeMode="Block")
    failures = await until(lambda: events_of(cluster, "wrong", "ProvisioningFailed"))
    assert failures[0] == "invalid volumeType 'nfs': local or hostPath"
    refused = await until(lambda: events_of(cluster, "block", "ProvisioningFailed"))
    assert refused[0] == f"{NAME} does not support block volume provisioning"
    await until(lambda: event_count(cluster, "wrong", "ProvisioningFailed") > 1)  # retried
    # The library's canProvision: before the Provisioning event, and never retried by itself.
    assert events_of(cluster, "block", "Provisioning") == []
    assert event_count(cluster, "block", "ProvisioningFailed") == 1
    assert cluster.objects("persistentvolumes") == []
    assert directories(base) == []


async def test_a_volume_of_another_node_is_ignored_not_deleted(
    cluster: EmulatedCluster, kcm: Any, operator: OperatorThread, base: pathlib.Path
) -> None:
    """`delete` raises IgnoredError: no VolumeFailedDelete, the PV and its directory stay."""
    storage_class(cluster, base)
    (base / "pv-elsewhere").mkdir(parents=True)
    cluster.create(
        "persistentvolumes",
        {"apiVersion": "v1", "kind": "PersistentVolume",
         "metadata": {"name": "pv-elsewhere", "annotations": {names.ANN_PROVISIONED_BY: NAME}},
         "spec": {"capacity": {"storage": "1Mi"}, "accessModes": ["ReadWriteOnce"],
                  "local": {"path": str(base / "pv-elsewhere")}, "storageClassName": "hostdir",
                  "persistentVolumeReclaimPolicy": "Delete",
                  "nodeAffinity": node_affinity("node-2"),
                  "claimRef": {"namespace": NAMESPACE, "name": "gone", "uid": "gone-uid"}}},
    )  # fmt: skip
    await until(
        lambda: (
            cluster.get("persistentvolumes", None, "pv-elsewhere").get("status", {}).get("phase")
            == "Released"
        )
    )
    claim(cluster, "after")  # once this one is done, the Released PV has been seen too
    await until(lambda: bound_volume(cluster, "after"))
    await asyncio.sleep(0.5)
    await operator.flush_events()  # events go out in the background: all posted by now
    assert cluster.get("persistentvolumes", None, "pv-elsewhere") is not None
    assert "pv-elsewhere" in directories(base)
    assert events_of(cluster, "pv-elsewhere", "VolumeFailedDelete") == []


async def test_served_next_to_a_csi_driver(
    cluster: EmulatedCluster,
    kcm: Any,
    driver: Any,
    settings: Settings,
    socket_path: pathlib.Path,
    base: pathlib.Path,
) -> None:
    """One operator, two back ends: the CSI driver's classes and the example's, side by side."""
    settings = dataclasses.replace(
        settings,
        csi=CSISettings(address=f"unix://{socket_path}", timeout=5.0, connect_timeout=10.0),
        provisioner=ProvisionerOptions(retry_interval_start=0.05, node_name=NODE),
    )
    storage_class(cluster, base)
    cluster.create(
        "storageclasses",
        {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "csi"},
         "provisioner": DRIVER_NAME, "reclaimPolicy": "Delete",
         "volumeBindingMode": "Immediate"},
    )  # fmt: skip
    async with running_operator(settings=settings, modules=(*DEFAULT_MODULES, EXAMPLE)):
        claim(cluster, "on-disk")
        claim(cluster, "on-driver", cls="csi")
        local = await until(lambda: bound_volume(cluster, "on-disk"))
        csi = await until(lambda: bound_volume(cluster, "on-driver"))
        assert "local" in local["spec"]
        assert "csi" not in local["spec"]
        assert csi["spec"]["csi"]["driver"] == DRIVER_NAME
        assert csi["metadata"]["annotations"][names.ANN_PROVISIONED_BY] == DRIVER_NAME
        writers = {e["manager"] for e in csi["metadata"]["managedFields"]}
        assert names.MANAGER_PROVISIONER in writers
        assert "kopf-csi.kopf.dev-hostdir" not in writers
        delete_claim(cluster, "on-disk")
        delete_claim(cluster, "on-driver")
        await until(lambda: cluster.objects("persistentvolumes") == [])
        assert directories(base) == []
        assert driver.state.volumes == {}


@pytest.mark.parametrize("deleted_meanwhile", [False, True], ids=["claim-kept", "claim-deleted"])
async def test_a_restart_mid_provisioning_makes_nothing_twice_and_loses_nothing(
    cluster: EmulatedCluster,
    kcm: Any,
    settings: Settings,
    base: pathlib.Path,
    deleted_meanwhile: bool,
) -> None:
    storage_class(cluster, base)
    gate.CALLS.clear()
    modules = (*DEFAULT_MODULES, GATED)
    async with running_operator(settings=settings, modules=modules):
        uid = claim(cluster, "midway")["metadata"]["uid"]
        await until(lambda: gate.CALLS)  # the directory is made; the PV is not saved yet
        journal = cluster.get("configmaps", OWN_NAMESPACE, journal_name(NAME))
        assert uid in (journal or {}).get("data", {})  # recorded before the back end ran
    assert cluster.objects("persistentvolumes") == []
    assert directories(base) == [f"pvc-{uid}"]
    if deleted_meanwhile:
        delete_claim(cluster, "midway")
    async with running_operator(settings=settings, modules=(*DEFAULT_MODULES, EXAMPLE)):
        if deleted_meanwhile:
            # Provisioned to the end for the deleted claim, then released and deleted.
            await until(lambda: events_of(cluster, "midway", "ProvisioningSucceeded"))
            await until(lambda: cluster.objects("persistentvolumes") == [])
            await until(lambda: directories(base) == [])
        else:
            volume = await until(lambda: bound_volume(cluster, "midway"))
            assert volume["metadata"]["name"] == f"pvc-{uid}"
            assert len(cluster.objects("persistentvolumes")) == 1
            assert directories(base) == [f"pvc-{uid}"]
        await until(
            lambda: (
                not (cluster.get("configmaps", OWN_NAMESPACE, journal_name(NAME)) or {}).get("data")
            )
        )


async def test_two_replicas_elect_one_leader_on_the_libraries_lease(
    cluster: EmulatedCluster, kcm: Any, settings: Settings, base: pathlib.Path
) -> None:
    election = LeaderElectionSettings(
        enabled=True, lease_duration=2.0, renew_deadline=1.0, retry_period=0.2
    )
    lease_name = NAME.replace("/", "-")  # the Go library's: the name, `/` as `-`
    storage_class(cluster, base)

    def replica(identity: str) -> OperatorThread:
        mine = dataclasses.replace(election, identity=identity)
        return OperatorThread(
            settings=dataclasses.replace(settings, leader_election=mine),
            modules=(*DEFAULT_MODULES, EXAMPLE),
        )

    first, second = replica("replica-a"), replica("replica-b")
    await first.start()
    lease = await until(lambda: cluster.get("leases", OWN_NAMESPACE, lease_name))
    await until(
        lambda: (
            (cluster.get("leases", OWN_NAMESPACE, lease_name) or {})
            .get("spec", {})
            .get("holderIdentity")
            == "replica-a"
        )
    )
    await second.start()  # kopf is up; its provisioner waits for the Lease
    try:
        claim(cluster, "one")
        await until(lambda: bound_volume(cluster, "one"))
        standby = second.memo.served_provisioners[NAME]
        assert standby.claims.depth > 0  # queued by its watch, never taken: it is standby
        await first.stop()  # releases the Lease: the standby takes over at once
        claim(cluster, "two")
        await until(lambda: bound_volume(cluster, "two"), timeout=15)
        holder = cluster.get("leases", OWN_NAMESPACE, lease_name)["spec"]["holderIdentity"]
        assert holder == "replica-b"
        assert lease["metadata"]["managedFields"][0]["manager"] == "kopf-csi.kopf.dev-hostdir"
        assert len(cluster.objects("persistentvolumes")) == 2
        assert len(directories(base)) == 2
    finally:
        await second.stop()
        await first.stop()
