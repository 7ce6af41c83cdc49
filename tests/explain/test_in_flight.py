"""What the operator is doing about an object now (`--operator`): the CSI call in flight for
it, and how long, from the CSI client's registry of unanswered calls; and a claim waiting its
turn in a long queue, its place and why. The driver holds the calls (fault injection: a hang
lasts until the call's timeout), so the state lasts while explain looks."""

from __future__ import annotations

import asyncio
import dataclasses
import pathlib
import re
from typing import Any

import pytest
import structlog

from kopf_csi import names
from kopf_csi.csi import CSIClient, CSITimeoutError
from kopf_csi.csi import messages as csi
from kopf_csi.driver import Driver
from kopf_csi.settings import CSISettings, Settings, WorkerSettings
from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.operator import OperatorThread

from ..conftest import until
from ..provisioner.conftest import make_claim, make_pod, make_storage_class, wait_for_bound
from .conftest import in_flight, until_explained

CSI_TIMEOUT = 30.0
"""Long enough that a held CreateVolume stays in flight while explain looks."""


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """One provisioning worker (`--worker-threads 1`), and a long CSI timeout."""
    csi = CSISettings(address=settings.csi.address, timeout=CSI_TIMEOUT, connect_timeout=10.0)
    return dataclasses.replace(settings, csi=csi, workers=WorkerSettings(provisioner=1))


async def test_a_claim_waiting_its_turn_behind_a_held_createvolume(
    cluster: EmulatedCluster,
    kcm: Any,
    operator: OperatorThread,
    driver: Driver,
    explain: Any,
    operator_url: str,
) -> None:
    driver.faults.hang("CreateVolume", times=1)  # the first claim's, for 30 s
    await make_storage_class(cluster, operator)
    make_claim(cluster, "first")
    first = await until_explained(
        explain, "pvc/default/first", "in-flight", "--operator", operator_url
    )
    assert in_flight("CreateVolume", CSI_TIMEOUT).fullmatch(
        first.json["summary"].removeprefix("waiting for the driver: ")
    ), first.json["summary"]
    assert first.text.first_line.startswith("WAITING: persistentvolumeclaim/default/first: ")
    assert first.text.code == 1
    assert first.json["state"] == "progressing"
    calls = [line for line in first.text.evidence if " in flight for " in line]
    assert len(calls) == 1, first.text.evidence
    assert in_flight("operator: CreateVolume", CSI_TIMEOUT).fullmatch(calls[0]), calls

    for name in ("second", "third", "fourth"):
        make_claim(cluster, name)
    last = await until_explained(
        explain, "pvc/default/fourth", "queued", "--operator", operator_url
    )
    assert last.json["summary"] == (
        "waiting its turn in the operator's claims queue: 3 of 3 queued:"
        " all 1 of its workers are busy"
    )
    assert (
        last.text.first_line
        == f"WAITING: persistentvolumeclaim/default/fourth: {last.json['summary']}"
    )
    assert (
        "operator: in its claims queue, waiting its turn: 3 of 3 queued, 1 of 1 workers busy"
        in (last.text.evidence)
    )
    assert last.json["next"][0].startswith("wait; raise --worker-threads (now 1)")
    assert last.text.code == 1
    assert last.json["exit_code"] == 1
    # Held for no other object: the queued claim has no call in flight.
    assert not any(" in flight for " in line for line in last.text.evidence)


async def test_an_attachment_waiting_for_a_held_controllerpublishvolume(
    cluster: EmulatedCluster,
    kcm: Any,
    operator: OperatorThread,
    driver: Driver,
    explain: Any,
    operator_url: str,
) -> None:
    driver.faults.hang("ControllerPublishVolume", times=1)  # until the attacher's 15 s timeout
    timeout = operator.settings.attacher.timeout
    await make_storage_class(cluster, operator)
    make_claim(cluster)
    make_pod(cluster, "app", "data")
    attachments = await until(lambda: cluster.objects("volumeattachments"))
    name = attachments[0]["metadata"]["name"]
    found = await until_explained(explain, f"va/{name}", "in-flight", "--operator", operator_url)
    assert found.text.first_line.startswith(
        f"WAITING: volumeattachment/{name}: waiting for the driver: ControllerPublishVolume"
    )
    assert in_flight("ControllerPublishVolume", timeout).fullmatch(
        found.json["summary"].removeprefix("waiting for the driver: ")
    ), found.json["summary"]
    assert found.text.evidence[0].endswith("node node-1, attached False")
    calls = [line for line in found.text.evidence if " in flight for " in line]
    assert len(calls) == 1, found.text.evidence
    assert in_flight("operator: ControllerPublishVolume", timeout).fullmatch(calls[0])
    assert found.text.code == 1
    assert found.json["state"] == "progressing"
    # Without the operator, explain sees only that no error is reported yet.
    plain = await until_explained(explain, f"va/{name}", "attaching")
    assert not any(" in flight for " in line for line in plain.text.evidence)


async def test_the_registry_holds_a_call_only_while_it_runs(
    driver: Driver, socket_path: pathlib.Path
) -> None:
    """The CSI client's registry: the call's RPC, timeout and object (as the controllers bind
    it for their log lines) while it runs; nothing once it has failed; never the request."""
    driver.faults.hang("DeleteVolume", times=1)
    async with CSIClient(f"unix://{socket_path}", timeout=5.0) as client:
        request = csi.DeleteVolumeRequest(volume_id="v1", secrets={"password": "hush"})
        with structlog.contextvars.bound_contextvars(kind="PersistentVolume", name="pv-1"):
            call = asyncio.create_task(client.delete_volume(request, timeout=2.0))
            (held,) = await until(lambda: client.calls_in_flight("persistentvolume", None, "pv-1"))
        assert (held.rpc, held.timeout, held.kind, held.namespace) == (
            "DeleteVolume",
            2.0,
            "PersistentVolume",
            "",
        )
        assert "hush" not in repr(held)
        assert client.calls_in_flight("persistentvolume", None, "pv-2") == []
        assert client.calls_in_flight("persistentvolumeclaim", "default", "pv-1") == []
        with pytest.raises(CSITimeoutError):
            await call
        assert client.calls_in_flight("persistentvolume", None, "pv-1") == []
        await client.delete_volume(request)  # answered: never listed after
        assert client.calls_in_flight("persistentvolume", None, "pv-1") == []


async def test_a_released_volume_waiting_for_a_held_deletevolume(
    cluster: EmulatedCluster,
    kcm: Any,
    operator: OperatorThread,
    driver: Driver,
    explain: Any,
    operator_url: str,
) -> None:
    driver.faults.hang("DeleteVolume", times=1)  # for 30 s
    await make_storage_class(cluster, operator)
    volume = await wait_for_bound(cluster, make_claim(cluster))
    name = volume["metadata"]["name"]
    cluster.delete("persistentvolumeclaims", "default", "data")
    held = await until_explained(explain, f"pv/{name}", "in-flight", "--operator", operator_url)
    assert in_flight("DeleteVolume", CSI_TIMEOUT).fullmatch(
        held.json["summary"].removeprefix("waiting for the driver: ")
    ), held.json["summary"]
    assert (
        held.text.evidence[0] == f"PersistentVolume {name}: phase Released, reclaim policy Delete"
    )
    assert any(
        in_flight("operator: DeleteVolume", CSI_TIMEOUT).fullmatch(line)
        for line in held.text.evidence
    ), held.text.evidence
    # Without the operator: released, and nothing known to hold it back.
    plain = await until_explained(explain, f"pv/{name}", "deleting")
    assert plain.json["summary"] == "released; waiting for the provisioner to delete it"


async def test_a_claim_held_by_the_operators_own_rate_limit(
    cluster: EmulatedCluster,
    kcm: Any,
    operator: OperatorThread,
    explain: Any,
    operator_url: str,
) -> None:
    """`--kube-api-qps` holding the provisioner's requests: the claim's verdict says so, and
    which flags to raise, instead of a worker busy with no reason given."""
    await make_storage_class(cluster, operator)
    # The role's burst spent and its rate cut, as by a burst of claims at --kube-api-qps 1.
    bucket = operator.memo.api.limits.bucket(names.MANAGER_PROVISIONER)
    bucket.qps, bucket.tokens = 1.0, -8.0  # the next request waits about 9 s for its turn
    make_claim(cluster, "held")
    held = await until_explained(
        explain, "pvc/default/held", "throttled", "--operator", operator_url
    )
    assert held.json["summary"].startswith(
        "held by the operator's own API rate limit: its csi-provisioner requests wait up to "
    ), held.json["summary"]
    assert held.json["summary"].endswith("for a turn (--kube-api-qps 1, --kube-api-burst 200)")
    assert held.text.code == 1
    assert held.json["state"] == "progressing"
    assert held.json["next"][0].startswith("wait, or raise --kube-api-qps and --kube-api-burst")
    facts = [line for line in held.text.evidence if "rate limit" in line]
    assert facts, held.text.evidence
    assert facts[0].startswith("operator: csi-provisioner's API requests wait for its rate limit")


async def test_a_claim_held_in_work_longer_than_in_work_after(
    cluster: EmulatedCluster,
    kcm: Any,
    operator: OperatorThread,
    driver: Driver,
    explain: Any,
    operator_url: str,
) -> None:
    """A worker on one claim past `--in-work-after` (here 1 s, not its default minute): the
    first blocker, and what it waits on, the CreateVolume the driver holds. Below the
    threshold the same claim is waiting for the driver, as before."""
    driver.faults.hang("CreateVolume", times=1)  # for 30 s
    await make_storage_class(cluster, operator)
    make_claim(cluster)
    waiting = await until_explained(
        explain, "pvc/default/data", "in-flight", "--operator", operator_url
    )
    assert waiting.json["state"] == "progressing"
    held = await until_explained(
        explain, "pvc/default/data", "in-work", "--operator", operator_url, "--in-work-after", "1"
    )
    summary = held.json["summary"]
    assert re.fullmatch(
        r"in work for \d+s, waiting on CreateVolume: in flight for \d+s \(timeout 30s\)", summary
    ), summary
    assert held.text.first_line.startswith(
        "BLOCKED: persistentvolumeclaim/default/data: in work for "
    ), held.text.first_line
    assert held.text.code == 1
    assert held.json["state"] == "blocked"
    assert held.json["next"][0].startswith("check the CSI driver (its logs, its back end):")
    # The evidence keeps the operator's own words: its queue, and the call in seconds.
    assert any(
        line.startswith("operator: in its claims queue, being worked on for ")
        for line in held.text.evidence
    ), held.text.evidence
    assert any(
        in_flight("operator: CreateVolume", CSI_TIMEOUT).fullmatch(line)
        for line in held.text.evidence
    ), held.text.evidence
