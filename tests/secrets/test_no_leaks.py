"""No secret value reaches any output, on the success paths and on every failure path.

Everything runs for real (kopf with every default module, the emulated API over HTTP, the KCM
stand-in, the reference driver over its socket), with the whole process's logs captured at
DEBUG. After each scenario, `LeakChecker` searches: every log record (ours, kopf's, aiohttp's,
tracebacks included), every version of every object the cluster saw (events, PVC/PV/VA
statuses and annotations; Secrets excluded, that is where the values belong), the metrics
exposition, and the texts of the exceptions raised. We test these aspects:

- provision → attach → detach → delete with provisioner and controller-publish secrets;
- the same with a driver that echoes the secret values in its error messages for every
  secret-bearing call (CreateVolume, ControllerPublish/Unpublish, DeleteVolume): the errors
  reach events and `attachError`/`detachError` stripped, and the lifecycle completes;
- an API server answering a Secret GET with a truncated body (its base64 data inside), and a
  Secret whose data is not base64: clear errors naming the secret, never its data;
- the CSI client's exception for a secret-echoing error: text, repr, chained cause, traceback;
- the checker's own sources were not empty (a scan of nothing would prove nothing).
"""

from __future__ import annotations

import asyncio
import base64
import json
import pathlib
from collections.abc import AsyncIterator

import pytest

from kopf_csi import names
from kopf_csi.csi import CSIClient, CSIError
from kopf_csi.csi import messages as csi
from kopf_csi.csi.codes import Code
from kopf_csi.csi.redaction import STRIPPED
from kopf_csi.driver import Driver
from kopf_csi.testing.emulator import Body, EmulatedCluster, Subscription
from kopf_csi.testing.kcm import attachment_name
from kopf_csi.testing.operator import OperatorThread
from kopf_csi.testing.secrets import CapturedLogs, LeakChecker

from ..conftest import DRIVER_NAME, NODE
from ..provisioner.conftest import (
    NAMESPACE,
    make_claim,
    make_pod,
    make_storage_class,
    settled,
    wait_for_bound,
    wait_for_event,
    wait_for_gone,
)
from .conftest import CREDENTIALS, make_secret

pytestmark = pytest.mark.usefixtures("kcm")

SECRET_PARAMETERS = {
    names.PARAM_PROVISIONER_SECRET_NAME: "creds",
    names.PARAM_PROVISIONER_SECRET_NAMESPACE: "${pvc.namespace}",
    names.PARAM_CONTROLLER_PUBLISH_SECRET_NAME: "creds",
    names.PARAM_CONTROLLER_PUBLISH_SECRET_NAMESPACE: NAMESPACE,
}
ECHO = f"login {CREDENTIALS['user']} refused with password {CREDENTIALS['password']}"
WATCHED = (
    "persistentvolumeclaims",
    "persistentvolumes",
    "volumeattachments",
    "events",
    "pods",
    "configmaps",
    "leases",
)


async def record(feed: Subscription, seen: list[Body]) -> None:
    async for change in feed:
        seen.append(change.object)


def scan_everything(
    checker: LeakChecker,
    *,
    outputs: CapturedLogs,
    cluster: EmulatedCluster,
    operator: OperatorThread,
    seen: list[Body],
) -> None:
    checker.scan("logs", outputs.text)
    checker.scan_objects("history", seen)
    checker.scan_cluster(cluster)
    metrics = getattr(operator.memo, "metrics", None)
    if metrics is not None:
        checker.scan("metrics", metrics.exposition().decode())
    assert checker.scanned["logs"] > 0
    assert any(source.startswith("history/") for source in checker.scanned)
    checker.assert_clean()


async def lifecycle(cluster: EmulatedCluster, operator: OperatorThread) -> Body:
    """Provision, attach, detach and delete one volume; returns the claim."""
    make_secret(cluster, "creds", CREDENTIALS)
    await make_storage_class(cluster, operator, parameters=SECRET_PARAMETERS)
    claim = make_claim(cluster)
    pv = await wait_for_bound(cluster, claim, timeout=15)
    make_pod(cluster, "app", claim["metadata"]["name"])
    va_name = attachment_name(pv["spec"]["csi"]["volumeHandle"], DRIVER_NAME, NODE)
    attached = await cluster.wait_for(
        "volumeattachments", None, va_name,
        lambda va: bool(va and (va.get("status") or {}).get("attached")), timeout=15,
    )  # fmt: skip
    assert attached is not None
    cluster.delete("pods", NAMESPACE, "app")
    await wait_for_gone(cluster, "volumeattachments", attached["metadata"]["name"], timeout=15)
    cluster.delete("persistentvolumeclaims", NAMESPACE, claim["metadata"]["name"])
    await wait_for_gone(cluster, "persistentvolumes", pv["metadata"]["name"], timeout=15)
    return claim


@pytest.fixture
async def seen(cluster: EmulatedCluster) -> AsyncIterator[list[Body]]:
    """Every version of every watched object, from the start of the test."""
    versions: list[Body] = []
    feed = cluster.subscribe(*WATCHED)
    task = asyncio.create_task(record(feed, versions))
    yield versions
    feed.close()
    await asyncio.gather(task, return_exceptions=True)


async def test_lifecycle_with_secrets_leaks_nothing(
    cluster: EmulatedCluster,
    operator: OperatorThread,
    outputs: CapturedLogs,
    checker: LeakChecker,
    seen: list[Body],
    secrets_seen: list[tuple[str, dict[str, str]]],
) -> None:
    await lifecycle(cluster, operator)
    methods = {method for method, given in secrets_seen if given == CREDENTIALS}
    assert {"CreateVolume", "ControllerPublishVolume", "ControllerUnpublishVolume",
            "DeleteVolume"} <= methods  # fmt: skip
    await settled(cluster)
    scan_everything(checker, outputs=outputs, cluster=cluster, operator=operator, seen=seen)


async def test_driver_errors_echoing_secrets_are_stripped_everywhere(
    cluster: EmulatedCluster,
    operator: OperatorThread,
    driver: Driver,
    outputs: CapturedLogs,
    checker: LeakChecker,
    seen: list[Body],
) -> None:
    for method in ("CreateVolume", "ControllerPublishVolume", "ControllerUnpublishVolume",
                   "DeleteVolume"):  # fmt: skip
        driver.faults.fail(method, Code.PERMISSION_DENIED, times=2, message=ECHO)
    claim = await lifecycle(cluster, operator)
    await settled(cluster)

    # The failures were reported, stripped: the paths that could leak were taken.
    failed = [e for e in seen if e.get("kind") == "Event" and STRIPPED in e.get("message", "")]
    reasons = {e["reason"] for e in failed}
    assert names.REASON_PROVISIONING_FAILED in reasons, reasons
    errors = [
        (va.get("status") or {}).get(field) or {}
        for va in seen
        if va.get("kind") == "VolumeAttachment"
        for field in ("attachError", "detachError")
    ]
    assert {STRIPPED in e.get("message", "") for e in errors if e} == {True}
    assert any("attachError" in (va.get("status") or {}) for va in seen)
    assert any("detachError" in (va.get("status") or {}) for va in seen)
    assert claim is not None
    scan_everything(checker, outputs=outputs, cluster=cluster, operator=operator, seen=seen)


async def test_api_errors_about_secrets_never_quote_their_data(
    cluster: EmulatedCluster,
    operator: OperatorThread,
    outputs: CapturedLogs,
    checker: LeakChecker,
    seen: list[Body],
) -> None:
    secret = make_secret(cluster, "creds", CREDENTIALS)
    truncated = json.dumps(secret)[:-40]  # cut inside `data`: the base64 values are in it
    assert base64.b64encode(CREDENTIALS["user"].encode()).decode() in truncated
    cluster.faults.add(200, verb="get", resource="secrets", body=truncated, times=1)
    cluster.faults.add(500, verb="get", resource="secrets", times=1, message="etcd timeout")
    await make_storage_class(cluster, operator, parameters=SECRET_PARAMETERS)
    claim = make_claim(cluster)
    await wait_for_event(
        cluster, claim, names.REASON_PROVISIONING_FAILED,
        message=lambda text: "not a JSON object" in text and "bytes>" in text,
    )  # fmt: skip
    await wait_for_event(
        cluster, claim, names.REASON_PROVISIONING_FAILED,
        message="error getting secret creds in namespace default: etcd timeout",
    )  # fmt: skip
    await wait_for_bound(cluster, claim, timeout=15)
    await settled(cluster)
    scan_everything(checker, outputs=outputs, cluster=cluster, operator=operator, seen=seen)


async def test_a_malformed_secret_is_an_error_naming_the_key_not_the_data(
    cluster: EmulatedCluster,
    operator: OperatorThread,
    outputs: CapturedLogs,
    checker: LeakChecker,
    seen: list[Body],
) -> None:
    # Not base64 (the API server would refuse it; an emulator or a proxy may not): the raw
    # value must not show either.
    raw = {"user": CREDENTIALS["user"], "password": CREDENTIALS["password"]}
    body = {"apiVersion": "v1", "kind": "Secret", "data": raw,
            "metadata": {"name": "creds", "namespace": NAMESPACE}}  # fmt: skip
    cluster.create("secrets", body)
    await make_storage_class(cluster, operator, parameters=SECRET_PARAMETERS)
    claim = make_claim(cluster)
    event = await wait_for_event(
        cluster, claim, names.REASON_PROVISIONING_FAILED,
        message=lambda text: text.startswith("error getting secret creds in namespace default"),
    )  # fmt: skip
    assert "is not base64" in event["message"]
    cluster.delete("secrets", NAMESPACE, "creds")
    make_secret(cluster, "creds", CREDENTIALS)  # fixed: provisioned on a retry
    await wait_for_bound(cluster, claim, timeout=15)
    await settled(cluster)
    scan_everything(checker, outputs=outputs, cluster=cluster, operator=operator, seen=seen)


async def test_csi_exceptions_carry_no_echoed_secret(
    driver: Driver, socket_path: pathlib.Path, checker: LeakChecker
) -> None:
    driver.faults.fail("CreateVolume", Code.PERMISSION_DENIED, times=1, message=ECHO)
    async with CSIClient(f"unix://{socket_path}", timeout=2.0) as client:
        with pytest.raises(CSIError) as caught:
            await client.create_volume(csi.CreateVolumeRequest(name="v", secrets=dict(CREDENTIALS)))
    assert STRIPPED in str(caught.value)
    checker.scan_exception("CSIError", caught.value)
    assert checker.scanned["CSIError"] > 0
    checker.assert_clean()
