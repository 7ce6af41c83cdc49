"""What only the operator knows (`--operator URL`: its `/debug/objects/...` endpoint), and that no
secret reaches explain's output or the endpoint."""

from __future__ import annotations

import base64
import json
from typing import Any

import aiohttp

from kopf_csi import names
from kopf_csi.csi import Code
from kopf_csi.driver import Driver
from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.operator import OperatorThread

from ..provisioner.conftest import make_claim, make_pod, make_storage_class
from .conftest import IDENTITY, until_explained

VALUE = "pw-Zq81#explain-secret-value"
HIDDEN_NAME = "node-stage-only-f00d"  # a secret name no Go sidecar shows for a claim


async def _get(url: str) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return response.status, json.loads(await response.text())


async def test_the_operator_adds_its_queue_state_and_last_error(
    cluster: EmulatedCluster,
    kcm: Any,
    operator: OperatorThread,
    driver: Driver,
    explain: Any,
    operator_url: str,
) -> None:
    driver.faults.fail("CreateVolume", Code.INTERNAL, message="the pool is read-only")
    await make_storage_class(cluster, operator)
    make_claim(cluster)
    found = await until_explained(
        explain, "pvc/default/data", "createvolume-failed", "--operator", operator_url
    )
    evidence = found.text.evidence
    assert any(
        line.startswith("operator: in its claims queue") and "failed attempts" in line
        for line in evidence
    ), evidence
    assert any(
        line.startswith("operator: its last Warning event ProvisioningFailed")
        and "the pool is read-only" in line
        for line in evidence
    ), evidence
    assert f"operator: serves {names.LEASE_PREFIX_PROVISIONER}hostpath.csi.kopf.dev" in evidence
    leases = f"operator: replica {IDENTITY}, leading, sees its Leases held by {IDENTITY}: "
    assert any(line.startswith(leases) for line in evidence), evidence

    status, state = await _get(f"{operator_url}/debug/objects/pvc/default/data")
    assert status == 200
    (queue,) = state["queues"]
    assert queue["queue"] == "claims"
    assert queue["failures"] >= 1
    status, answer = await _get(f"{operator_url}/debug/objects/pvc/data")
    assert status == 404
    assert "needs a namespace" in answer["error"]
    status, answer = await _get(f"{operator_url}/debug/objects/pods/default/data")
    assert status == 404


async def test_an_unreachable_operator_is_a_fact_not_a_failure(
    cluster: EmulatedCluster, kcm: Any, operator: OperatorThread, explain: Any
) -> None:
    make_claim(cluster, storage_class="fast")
    found = await until_explained(
        explain, "pvc/default/data", "storageclass-missing", "--operator", "http://127.0.0.1:9"
    )
    assert any(line.startswith("operator: not reachable") for line in found.text.evidence)
    assert found.text.code == 1


async def test_no_secret_reaches_explain_or_the_endpoint(
    cluster: EmulatedCluster,
    kcm: Any,
    operator: OperatorThread,
    driver: Driver,
    explain: Any,
    operator_url: str,
) -> None:
    """A secret value in every place the operator can see one: the Secrets' data, a class
    parameter, the driver's error messages (echoed); and a secret name the Go sidecars never
    show for a claim (the node-stage secret's). None of them appears anywhere."""
    encoded = base64.b64encode(VALUE.encode()).decode()
    for name in ("creds", HIDDEN_NAME):
        cluster.create(
            "secrets",
            {"apiVersion": "v1", "kind": "Secret",
             "metadata": {"name": name, "namespace": "default"}, "data": {"password": encoded}},
        )  # fmt: skip
    parameters = {
        names.PARAM_PROVISIONER_SECRET_NAME: "creds",
        names.PARAM_PROVISIONER_SECRET_NAMESPACE: "default",
        names.PARAM_CONTROLLER_PUBLISH_SECRET_NAME: "creds",
        names.PARAM_CONTROLLER_PUBLISH_SECRET_NAMESPACE: "default",
        names.PARAM_NODE_STAGE_SECRET_NAME: HIDDEN_NAME,
        names.PARAM_NODE_STAGE_SECRET_NAMESPACE: "default",
    }
    echo = f"login refused with password {VALUE}"
    refusing = driver.faults.fail("CreateVolume", Code.PERMISSION_DENIED, message=echo)
    driver.faults.fail("ControllerPublishVolume", Code.PERMISSION_DENIED, message=echo)
    await make_storage_class(cluster, operator, parameters=parameters)
    make_claim(cluster)
    failing = await until_explained(
        explain, "pvc/default/data", "createvolume-failed", "--operator", operator_url
    )
    driver.faults.remove(refusing)
    make_pod(cluster, "app", "data")
    attaching = await until_explained(
        explain, "pvc/default/data", "attach-failed", "--operator", operator_url
    )
    va = attaching.json["next"][0].split()[1].rstrip(";")
    volume = next(
        line.split()[1].rstrip(":")
        for line in attaching.text.evidence
        if "PersistentVolume" in line
    )
    outputs = [failing.text.stdout, json.dumps(failing.json), attaching.text.stdout,
               json.dumps(attaching.json)]  # fmt: skip
    for target in (va, f"pv/{volume}"):
        found = await explain(target, "--operator", operator_url)
        outputs += [found.text.stdout, found.text.stderr, json.dumps(found.json)]
    claim = cluster.get("persistentvolumeclaims", "default", "data")
    assert claim is not None
    uid = claim["metadata"]["uid"]
    for path in (f"pvc/default/data?uid={uid}", f"pv/{volume}", f"va/{va.split('/')[-1]}"):
        status, state = await _get(f"{operator_url}/debug/objects/{path}")
        assert status == 200
        outputs.append(json.dumps(state))
    # The paths that could leak were taken: the echoing errors were read and reported.
    assert "login refused with password" in failing.json["summary"]
    assert "login refused with password" in attaching.json["summary"]
    for output in outputs:
        assert VALUE not in output
        assert encoded not in output
        assert HIDDEN_NAME not in output
