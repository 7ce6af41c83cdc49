"""Malformed claims, classes, attachments and API answers: a clear word each, and no harm done.

Everything runs for real (every default module, the emulated API over HTTP, the KCM stand-in,
the reference driver). The emulator checks no schema, so objects a real API server would
refuse reach the operator too. All the bad objects of a test are created together with good
ones, which must be provisioned (or attached) as usual. We test these aspects:

- claims: an unparsable size, a negative size, a size beyond int64, an unknown access mode,
  a missing class, a missing clone source: a ProvisioningFailed event (or, for the class, a
  log line, as in Go) each; unicode everywhere and a missing `resources` are fine;
- wrong types (a map for `accessModes`, a list for a size): the same clear events; a list
  for a class's `parameters`: a log line naming the claim, the operator stays up, nothing is
  written (a `spec` that is not a map is left out: the KCM stand-in cannot bind around it);
- classes: an unknown reserved parameter: the Go message;
- VolumeAttachments for a missing PV, without a source, for a node without CSINode: each gets
  `status.attachError` with the Go message, and a good VA is attached;
- the API answering malformed JSON (to a PV create, to a claim list/watch): retried, and the
  claims are provisioned.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kopf_csi import names
from kopf_csi.driver import Driver
from kopf_csi.testing.emulator import Body, EmulatedCluster
from kopf_csi.testing.operator import OperatorThread
from kopf_csi.testing.secrets import CapturedLogs, capture_logs

from ..conftest import DRIVER_NAME, NODE
from ..provisioner.conftest import (
    NAMESPACE,
    make_claim,
    make_storage_class,
    wait_for_bound,
    wait_for_event,
    wait_until,
)

pytestmark = pytest.mark.usefixtures("kcm")


@pytest.fixture
def logs() -> Any:
    with capture_logs(exclude=("kopf_csi.driver",)) as captured:
        yield captured


def failed(cluster: EmulatedCluster, claim: Body, message: str) -> Any:
    return wait_for_event(
        cluster, claim, names.REASON_PROVISIONING_FAILED,
        message=lambda text: message in text, timeout=10,
    )  # fmt: skip


async def logged(logs: CapturedLogs, *needles: str, timeout: float = 10.0) -> None:
    await wait_until(lambda: all(n in logs.text for n in needles), timeout=timeout, what=needles)


def raw_claim(cluster: EmulatedCluster, name: str, spec: Any) -> Body:
    body = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "spec": spec,
            "metadata": {"name": name, "namespace": NAMESPACE}}  # fmt: skip
    return cluster.create("persistentvolumeclaims", body)


async def test_malformed_claims_are_reported_and_good_ones_served(
    cluster: EmulatedCluster, operator: OperatorThread, driver: Driver
) -> None:
    await make_storage_class(cluster, operator)
    bad_size = make_claim(cluster, "bad-size", size="lots")
    negative = make_claim(cluster, "negative", size="-1Gi")
    huge = make_claim(cluster, "huge", size="99999999Ei")
    odd_mode = make_claim(cluster, "odd-mode", access_modes=["ReadWriteSometimes"])
    no_class = make_claim(cluster, "no-class", storage_class="missing")
    no_source = make_claim(
        cluster, "no-source", data_source={"kind": "PersistentVolumeClaim", "name": "ghost"}
    )
    unicode = make_claim(
        cluster, "unicode", annotations={"example.com/ünïcödé": "värde 🚀 ∑ \u0000 end"}
    )
    no_resources = make_claim(cluster, "no-resources", extra_spec={"resources": {}})
    wrong_modes = make_claim(cluster, "wrong-modes", extra_spec={"accessModes": {"RWX": 1}})
    wrong_size = make_claim(
        cluster, "wrong-size", extra_spec={"resources": {"requests": {"storage": ["1Gi"]}}}
    )

    await failed(cluster, bad_size, "quantities must match the regular expression")
    await failed(cluster, negative, "invalid storage request -1Gi: must be greater than")
    await failed(cluster, huge, "rpc error: code = ResourceExhausted")  # 8 EiB: too big
    await failed(cluster, odd_mode, "unsupported AccessMode combination: [ReadWriteSometimes]")
    await failed(cluster, no_source, "error getting PVC ghost")
    await failed(cluster, wrong_modes, "unsupported AccessMode combination: [RWX]")
    await failed(cluster, wrong_size, "quantities must match the regular expression")
    await wait_for_bound(cluster, unicode, timeout=10)
    await wait_for_bound(cluster, no_resources, timeout=10)
    good = make_claim(cluster, "good")
    await wait_for_bound(cluster, good, timeout=10)
    assert operator.alive
    for claim in (bad_size, negative, huge, odd_mode, no_class, no_source, wrong_modes):
        name = claim["metadata"]["name"]
        assert not cluster.get("persistentvolumeclaims", NAMESPACE, name)["spec"].get("volumeName")
    assert len(driver.state.volumes) == 3  # unicode, no-resources, good


async def test_a_class_with_bad_parameters_is_reported(
    cluster: EmulatedCluster, operator: OperatorThread, logs: CapturedLogs
) -> None:
    await make_storage_class(
        cluster, operator, "typo", parameters={f"{names.PARAMETER_PREFIX}fs-type": "ext4"}
    )
    wrong = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
             "metadata": {"name": "wrong"}, "provisioner": DRIVER_NAME,
             "parameters": ["not", "a", "map"]}  # fmt: skip
    cluster.create("storageclasses", wrong)
    await make_storage_class(cluster, operator, "sc")
    typo = make_claim(cluster, "typo", storage_class="typo")
    broken = make_claim(cluster, "broken", storage_class="wrong")
    good = make_claim(cluster, "good")
    await failed(cluster, typo, 'found unknown parameter key "csi.storage.k8s.io/fs-type"')
    await wait_for_bound(cluster, good, timeout=10)
    await logged(logs, "default/broken")
    assert operator.alive
    assert not cluster.get("persistentvolumeclaims", NAMESPACE, "broken")["spec"].get("volumeName")
    assert broken is not None


def attachment(name: str, *, source: dict[str, Any] | None, node: str = NODE) -> Body:
    spec: dict[str, Any] = {"attacher": DRIVER_NAME, "nodeName": node}
    if source is not None:
        spec["source"] = source
    return {"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
            "metadata": {"name": name}, "spec": spec}  # fmt: skip


async def attach_error(cluster: EmulatedCluster, name: str) -> str:
    found = await cluster.wait_for(
        "volumeattachments", None, name,
        lambda va: bool(va and (va.get("status") or {}).get("attachError")), timeout=10,
    )  # fmt: skip
    assert found is not None
    return str(found["status"]["attachError"]["message"])


async def test_malformed_attachments_get_an_attach_error_and_good_ones_attach(
    cluster: EmulatedCluster, operator: OperatorThread
) -> None:
    await make_storage_class(cluster, operator)
    claim = make_claim(cluster, "data")
    pv = await wait_for_bound(cluster, claim, timeout=10)
    source = {"persistentVolumeName": pv["metadata"]["name"]}
    cluster.create(
        "volumeattachments", attachment("missing-pv", source={"persistentVolumeName": "ghost"})
    )
    cluster.create("volumeattachments", attachment("no-source", source=None))
    cluster.create("volumeattachments", attachment("no-csinode", source=source, node="ghost-node"))
    cluster.create("volumeattachments", attachment("good", source=source))
    assert "ghost" in await attach_error(cluster, "missing-pv")
    assert await attach_error(cluster, "no-source")
    assert "ghost-node" in await attach_error(cluster, "no-csinode")
    attached = await cluster.wait_for(
        "volumeattachments", None, "good",
        lambda va: bool(va and (va.get("status") or {}).get("attached")), timeout=10,
    )  # fmt: skip
    assert attached is not None


async def test_malformed_api_answers_are_retried(
    cluster: EmulatedCluster, operator: OperatorThread, driver: Driver, logs: CapturedLogs
) -> None:
    await make_storage_class(cluster, operator)
    cluster.faults.add(201, verb="create", resource="persistentvolumes", body="{not json", times=2)
    claim = make_claim(cluster, "data")
    await failed(cluster, claim, "not a JSON object")
    pv = await wait_for_bound(cluster, claim, timeout=10)
    assert list(driver.state.volumes) == [pv["spec"]["csi"]["volumeHandle"]]
    cluster.faults.add(200, verb="watch", resource="persistentvolumeclaims", body="[oops", times=1)
    cluster.faults.add(200, verb="list", resource="persistentvolumeclaims", body="{oops", times=1)
    await asyncio.sleep(0.2)
    later = make_claim(cluster, "later")
    await wait_for_bound(cluster, later, timeout=20)
    assert operator.alive
