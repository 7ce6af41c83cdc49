"""Saving the PV after CreateVolume: an existing PV counts as saved, unless it is on its way out.

A deleted claim finished after a restart may meet an earlier PV of the same name that is still
being deleted. Counting that as "saved" (AlreadyExists) would leave the new backend volume with
no PV once the old one is gone: a leak. The save is retried instead, and succeeds after.
"""

from __future__ import annotations

import pathlib
import types
from collections.abc import AsyncIterator
from typing import Any

import pytest

from kopf_csi import kube
from kopf_csi.caches import Caches
from kopf_csi.provisioning.errors import ProvisioningError
from kopf_csi.provisioning.operations import Provisioner
from kopf_csi.provisioning.states import ProvisioningState
from kopf_csi.testing.emulator import EmulatedCluster


@pytest.fixture
async def api(kubeconfig: pathlib.Path) -> AsyncIterator[kube.KubeClient]:
    async with await kube.KubeClient.connect(kubeconfig) as client:
        yield client


def _pv(handle: str, *finalizers: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": "pvc-1", "finalizers": list(finalizers)},
        "spec": {"capacity": {"storage": "1Mi"}, "accessModes": ["ReadWriteOnce"],
                 "csi": {"driver": "d", "volumeHandle": handle}},
    }  # fmt: skip


def _owner(api: kube.KubeClient) -> Any:
    """What `Provisioner._save` uses of the provisioner: the API, the caches, one helper."""
    owner = types.SimpleNamespace(api=api, caches=Caches())
    owner._existing_volume = lambda name: Provisioner._existing_volume(owner, name)  # type: ignore[arg-type]
    return owner


async def test_an_existing_pv_counts_as_saved(
    cluster: EmulatedCluster, api: kube.KubeClient
) -> None:
    cluster.create("persistentvolumes", _pv("vol-1"))
    owner = _owner(api)
    await Provisioner._save(owner, _pv("vol-1"))  # type: ignore[arg-type]
    assert "pvc-1" in owner.caches.volumes


async def test_a_pv_being_deleted_is_not_a_save_and_the_retry_is(
    cluster: EmulatedCluster, api: kube.KubeClient
) -> None:
    cluster.create("persistentvolumes", _pv("vol-old", "example.com/hold"))
    cluster.delete("persistentvolumes", None, "pvc-1")  # terminating: the finalizer holds it
    owner = _owner(api)
    with pytest.raises(ProvisioningError) as info:
        await Provisioner._save(owner, _pv("vol-new"))  # type: ignore[arg-type]
    assert info.value.state is ProvisioningState.IN_BACKGROUND  # the volume exists: retry
    assert "being deleted" in info.value.message
    cluster.patch("persistentvolumes", None, "pvc-1", {"metadata": {"finalizers": []}})
    assert cluster.get("persistentvolumes", None, "pvc-1") is None
    await Provisioner._save(owner, _pv("vol-new"))  # type: ignore[arg-type]
    saved = cluster.get("persistentvolumes", None, "pvc-1")
    assert saved is not None
    assert saved["spec"]["csi"]["volumeHandle"] == "vol-new"
