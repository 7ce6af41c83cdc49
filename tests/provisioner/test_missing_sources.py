"""A data source that does not exist, end to end: Go's ProvisioningFailed text, word for word.

We test these aspects:
- a clone of a claim that does not exist: the text of the informer's lister, which the Go
  provisioner reads claims from (`persistentvolumeclaim "..." not found`, singular);
- a restore from a VolumeSnapshot that does not exist: the API server's own text, which the Go
  provisioner gets as it asks the server
  (`volumesnapshots.snapshot.storage.k8s.io "..." not found`);
- a VolumeAttributesClass that does not exist: the server's text, bare, as Go returns it;
- nothing is created meanwhile, and a clone is provisioned once its source appears.
"""

from __future__ import annotations

import pytest

from kopf_csi import names
from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.operator import OperatorThread
from kopf_csi.testing.spies import Calls

from .conftest import NAMESPACE, make_claim, make_storage_class, wait_for_bound, wait_for_event

pytestmark = pytest.mark.usefixtures("kcm")

FAILED = names.REASON_PROVISIONING_FAILED


async def test_a_clone_of_a_missing_claim_says_so_as_go_does(
    cluster: EmulatedCluster, operator: OperatorThread, calls: Calls
) -> None:
    await make_storage_class(cluster, operator)
    source = {"kind": "PersistentVolumeClaim", "name": "missing-pvc"}
    clone = make_claim(cluster, "clone", data_source=source)
    await wait_for_event(
        cluster,
        clone,
        FAILED,
        message="error getting handle for DataSource Type PersistentVolumeClaim by Name"
        f' missing-pvc: error getting PVC missing-pvc (namespace "{NAMESPACE}") from api server:'
        ' persistentvolumeclaim "missing-pvc" not found',
    )
    assert calls.count("CreateVolume") == 0

    # The source appears: the clone is made from it.
    await wait_for_bound(cluster, make_claim(cluster, "missing-pvc"))
    await wait_for_bound(cluster, clone)


async def test_a_restore_from_a_missing_snapshot_carries_the_servers_text(
    cluster: EmulatedCluster, operator: OperatorThread, calls: Calls
) -> None:
    await make_storage_class(cluster, operator)
    source = {
        "apiGroup": "snapshot.storage.k8s.io",
        "kind": "VolumeSnapshot",
        "name": "missing-snap",
    }
    restore = make_claim(cluster, "restore", data_source=source)
    await wait_for_event(
        cluster,
        restore,
        FAILED,
        message="error getting handle for DataSource Type VolumeSnapshot by Name missing-snap:"
        " error getting snapshot missing-snap from api server:"
        ' volumesnapshots.snapshot.storage.k8s.io "missing-snap" not found',
    )
    assert calls.count("CreateVolume") == 0


async def test_a_missing_volume_attributes_class_carries_the_servers_text(
    cluster: EmulatedCluster, operator: OperatorThread, calls: Calls
) -> None:
    """Not a data source, but read the same way: Go returns the Get's error as it is."""
    await make_storage_class(cluster, operator)
    claim = make_claim(cluster, extra_spec={"volumeAttributesClassName": "missing-vac"})
    await wait_for_event(
        cluster,
        claim,
        FAILED,
        message='volumeattributesclasses.storage.k8s.io "missing-vac" not found',
    )
    assert calls.count("CreateVolume") == 0
