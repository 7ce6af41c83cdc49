"""The provisioner back-end interface, pinned as public API.

We test: the names `kopf_csi.provisioning.backends` exports and their signatures (a change here
breaks users' provisioners, so it must be deliberate); the states' values; that the example and
the CSI back end conform to the protocol; the results and how a failed one becomes the error the
controller handles (infeasible included); `register_provisioner`'s checks; and how a back end's
partial PV is completed, leaving a complete one (the CSI back end's) untouched.
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from kopf_csi import names
from kopf_csi.provisioning import backends
from kopf_csi.provisioning.backends import (
    ProvisionerBackend,
    ProvisioningState,
    ProvisionOptions,
    ProvisionResult,
    register_provisioner,
    registered_provisioners,
)
from kopf_csi.provisioning.csi_backend import CSIBackend
from kopf_csi.provisioning.states import failure_outcome
from kopf_csi.provisioning.volumes import complete_volume
from kopf_csi_handlers.examples.hostdir_provisioner import HostDirProvisioner

CLAIM = {
    "metadata": {"name": "data", "namespace": "ns", "uid": "u-1", "resourceVersion": "7"},
    "spec": {"storageClassName": "sc", "accessModes": ["ReadWriteOnce"],
             "resources": {"requests": {"storage": "2Mi"}}},
}  # fmt: skip
CLASS = {"metadata": {"name": "sc"}, "provisioner": "example.com/x", "reclaimPolicy": "Retain",
         "mountOptions": ["noatime"], "parameters": {"a": "b"}}  # fmt: skip


def test_the_exported_names() -> None:
    assert sorted(backends.__all__) == [
        "BlockProvisioner", "DeletionGuard", "IgnoredError", "ProvisionOptions",
        "ProvisionResult", "ProvisionerBackend", "ProvisioningError", "ProvisioningState",
        "Qualifier", "register_provisioner", "registered_provisioners",
    ]  # fmt: skip


def test_the_signatures() -> None:
    def sig(obj: Any) -> str:
        return str(inspect.signature(obj))

    assert sig(register_provisioner) == (
        "(memo: 'MutableMapping[str, Any]', *, name: 'str',"
        " provisioner: 'ProvisionerBackend', manager: 'str | None' = None) -> 'None'"
    )
    assert sig(ProvisionerBackend.provision) == (
        "(self, options: 'ProvisionOptions') -> 'ProvisionResult'"
    )
    assert sig(ProvisionerBackend.delete) == "(self, volume: 'Body') -> 'None'"
    assert sig(backends.Qualifier.should_provision) == "(self, claim: 'Body') -> 'bool'"
    assert sig(backends.DeletionGuard.should_delete) == "(self, volume: 'Body') -> 'bool'"
    assert sig(backends.BlockProvisioner.supports_block) == "(self) -> 'bool'"
    assert [f.name for f in ProvisionOptions.__dataclass_fields__.values()] == [
        "claim", "storage_class", "volume_name", "selected_node",
    ]  # fmt: skip
    assert [f.name for f in ProvisionResult.__dataclass_fields__.values()] == [
        "state", "volume", "message", "infeasible",
    ]  # fmt: skip


def test_the_states_are_the_libraries() -> None:
    assert {s.name: s.value for s in ProvisioningState} == {
        "FINISHED": "Finished", "IN_BACKGROUND": "InBackground", "NO_CHANGE": "NoChange",
        "RESCHEDULE": "Reschedule",
    }  # fmt: skip


def test_the_example_and_the_csi_back_end_conform() -> None:
    assert isinstance(HostDirProvisioner(node_name="n"), ProvisionerBackend)
    assert not isinstance(HostDirProvisioner(node_name="n"), backends.BlockProvisioner)
    for method in ("provision", "delete", "supports_block"):
        assert inspect.iscoroutinefunction(getattr(CSIBackend, method)) is (
            method != "supports_block"
        )


def test_options_read_the_claim_and_its_class() -> None:
    node = {"metadata": {"name": "node-1"}}
    options = ProvisionOptions(CLAIM, CLASS, "pvc-u-1", selected_node=node)
    assert options.parameters == {"a": "b"}
    assert options.reclaim_policy == "Retain"
    assert options.mount_options == ("noatime",)
    assert options.allowed_topologies == ()
    assert options.selected_node_name == "node-1"
    assert options.requested_bytes == 2 * 2**20
    assert not options.block
    assert ProvisionOptions(CLAIM, {}, "v").reclaim_policy == "Delete"


def test_a_failed_result_is_the_error_the_controller_handles() -> None:
    error = ProvisionResult.infeasible_request("bad size").error()
    assert (error.message, error.state, error.infeasible) == (
        "bad size", ProvisioningState.FINISHED, True
    )  # fmt: skip
    outcome = failure_outcome(error, state=error.state, claim=CLAIM)
    assert outcome.infeasible
    assert outcome.message == names.MESSAGE_INFEASIBLE.format(error="bad size")
    assert ProvisionResult.reschedule("full").error().state is ProvisioningState.RESCHEDULE
    assert ProvisionResult.in_background("slow").state is ProvisioningState.IN_BACKGROUND
    assert not ProvisionResult.failed("x").succeeded
    with pytest.raises(ValueError, match="not an error"):
        ProvisionResult.persistent_volume({"spec": {}}).error()


def test_register_checks_the_back_end_and_the_name() -> None:
    memo: dict[str, Any] = {}
    started: list[str] = []
    register_provisioner(memo, name="example.com/a", provisioner=HostDirProvisioner(node_name="n"))
    memo[backends.STARTER_KEY] = lambda registration: started.append(registration.name)
    register_provisioner(
        memo, name="example.com/b", provisioner=HostDirProvisioner(node_name="n"), manager="b"
    )
    assert [(r.name, r.manager) for r in registered_provisioners(memo)] == [
        ("example.com/a", "example.com-a"), ("example.com/b", "b"),
    ]  # fmt: skip
    assert started == ["example.com/b"]  # registered after the controller started: at once
    with pytest.raises(ValueError, match="registered already"):
        register_provisioner(
            memo, name="example.com/a", provisioner=HostDirProvisioner(node_name="n")
        )
    with pytest.raises(TypeError):
        register_provisioner(memo, name="example.com/c", provisioner=object())  # type: ignore[arg-type]


def test_a_volume_source_is_completed_from_the_claim_and_class() -> None:
    result = ProvisionResult.volume_source(
        {"nfs": {"server": "s", "path": "/e"}}, labels={"x": "y"}
    )
    assert result.volume is not None
    volume = complete_volume(
        result.volume, claim=CLAIM, storage_class=CLASS, volume_name="pvc-u-1",
        requested_bytes=2 * 2**20,
    )  # fmt: skip
    assert volume == {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {
            "labels": {"x": "y"},
            "name": "pvc-u-1",
            "annotations": {names.ANN_PROVISIONED_BY: "example.com/x"},
            "finalizers": [names.FINALIZER_PV],
        },
        "spec": {
            "nfs": {"server": "s", "path": "/e"},
            "accessModes": ["ReadWriteOnce"],
            "capacity": {"storage": "2Mi"},
            "claimRef": {"kind": "PersistentVolumeClaim", "namespace": "ns", "name": "data",
                         "uid": "u-1", "apiVersion": "v1", "resourceVersion": "7"},
            "storageClassName": "sc",
            "mountOptions": ["noatime"],
            "persistentVolumeReclaimPolicy": "Retain",
        },
    }  # fmt: skip
    assert complete_volume(
        volume, claim=CLAIM, storage_class=CLASS, volume_name="other", requested_bytes=1,
    ) == volume  # fmt: skip
