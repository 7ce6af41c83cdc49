"""The server's defaulting: what a write leaves out is stored with the API's default.

A StorageClass without `reclaimPolicy` or `volumeBindingMode` is stored with `Delete` and
`Immediate`, on create and on every update, over HTTP and through the Python API, and the writer
owns the defaulted fields; what a write gives is kept. End to end: a class applied without a
policy gives volumes the `Delete` policy, so they go with their claims, as on a real cluster.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from kopf_csi.driver import Driver
from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.kcm import ControllerManager
from kopf_csi.testing.operator import OperatorThread
from kopf_csi.testing.pytest_plugin import DRIVER_NAME, seed_node, until

CLASSES = "storageclasses"


def storage_class(name: str, **fields: Any) -> dict[str, Any]:
    return {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": name}, "provisioner": DRIVER_NAME, **fields}  # fmt: skip


async def test_a_class_without_policy_or_mode_is_stored_with_the_defaults(
    cluster: EmulatedCluster,
) -> None:
    async with aiohttp.ClientSession(cluster.url) as session:
        path = "/apis/storage.k8s.io/v1/storageclasses"
        async with session.post(path, json=storage_class("plain")) as response:
            assert response.status == 201
            created = await response.json()
    assert created["reclaimPolicy"] == "Delete"
    assert created["volumeBindingMode"] == "Immediate"
    (owned,) = created["metadata"]["managedFields"]
    assert {"f:reclaimPolicy", "f:volumeBindingMode"} <= set(owned["fieldsV1"])
    kept = cluster.create(
        CLASSES,
        storage_class("kept", reclaimPolicy="Retain", volumeBindingMode="WaitForFirstConsumer"),
    )
    assert (kept["reclaimPolicy"], kept["volumeBindingMode"]) == ("Retain", "WaitForFirstConsumer")


async def test_an_update_that_drops_a_default_gets_it_back(cluster: EmulatedCluster) -> None:
    """The class keeps its policy (a real server forbids changing it: a 422, which the emulator
    does not check), so only the defaulting on update is at stake."""
    cluster.create(CLASSES, storage_class("c", reclaimPolicy="Delete"))
    patched = cluster.patch(CLASSES, None, "c", {"reclaimPolicy": None})
    assert patched["reclaimPolicy"] == "Delete"
    replaced = cluster.replace(CLASSES, None, "c", storage_class("c"))
    assert replaced["reclaimPolicy"] == "Delete"
    assert replaced["volumeBindingMode"] == "Immediate"


# The emulator's suite builds its clusters bare, without the kit's authorizer (conftest.py):
# what this test checks is the server's defaulting, through the operator; RBAC is not at stake.
@pytest.mark.kit_rbac(False)
async def test_a_class_without_policy_gives_volumes_that_go_with_their_claims(
    cluster: EmulatedCluster, kcm: ControllerManager, driver: Driver, operator: OperatorThread
) -> None:
    seed_node(cluster)  # this folder's clusters start empty; the driver reports topology
    cluster.create(CLASSES, storage_class("plain"))
    cluster.create(
        "persistentvolumeclaims",
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
         "metadata": {"name": "data", "namespace": "default"},
         "spec": {"storageClassName": "plain", "accessModes": ["ReadWriteOnce"],
                  "resources": {"requests": {"storage": "1Mi"}}}},
    )  # fmt: skip
    (volume,) = await until(lambda: cluster.objects("persistentvolumes"))
    assert volume["spec"]["persistentVolumeReclaimPolicy"] == "Delete"
    await until(lambda: driver.state.volumes)
    cluster.delete("persistentvolumeclaims", "default", "data")
    await until(lambda: not cluster.objects("persistentvolumes"))
    await until(lambda: not driver.state.volumes)
