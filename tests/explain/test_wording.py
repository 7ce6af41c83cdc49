"""What explain says, on plain dicts (pure) and, for explain's own refusals, as a process.

We test these aspects:
- sizes read as quantities (`900Ti`), never raw byte counts;
- a claim too large is deleted and made again (its request cannot be lowered);
- an operator that answers but serves another provisioner adds a fact to the answer explain
  gives without it, instead of replacing it;
- a VolumeSnapshot with no class: the default class of its source's driver, or why none;
- what answered at a wrong `--operator` URL (not "not reachable"), `--operator` without
  `http://`, a wrong `--context`, two namespaces, and `kubectl csi` without a command.
"""

from __future__ import annotations

import asyncio
import datetime
import pathlib
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from kopf_csi.explain import reading
from kopf_csi.explain.observed import Observed
from kopf_csi.explain.rules import diagnose, size
from kopf_csi.targets import Target
from kopf_csi.testing.emulator import EmulatedCluster

from .conftest import run_explain

NOW = datetime.datetime(2026, 1, 1, 12, 0, tzinfo=datetime.UTC)
LIVE = {
    "metadata": {"name": "d-example-com", "namespace": "kube-system"},
    "spec": {"holderIdentity": "r1", "leaseDurationSeconds": 15,
             "renewTime": "2026-01-01T11:59:58.000000Z"},
}  # fmt: skip
DEFAULT = {"snapshot.storage.kubernetes.io/is-default-class": "true"}


def _claim(storage: str = "1Gi") -> dict[str, Any]:
    return {
        "metadata": {"name": "data", "namespace": "ns", "uid": "u1", "annotations": {}},
        "spec": {"storageClassName": "sc", "resources": {"requests": {"storage": storage}}},
        "status": {"phase": "Pending"},
    }


def _pending(provisioner: str = "d.example.com", **fields: Any) -> Observed:
    fields = {"storage_class_name": "sc", "object": _claim(), **fields}
    fields.setdefault("storage_class", {"metadata": {"name": "sc"}, "provisioner": provisioner})
    target = Target("persistentvolumeclaim", "data", "ns")
    return Observed(target=target, now=NOW, **fields)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (989560464998400, "900Ti"),
        (1073741824, "1Gi"),
        (1000000000, "1G"),
        (1536 * 1024**2, "1536Mi"),
        (1234567, "~1.2Mi"),
        (512, "512"),
        (0, "0"),
    ],
)
def test_sizes_are_quantities(value: int, text: str) -> None:
    assert size(value) == text


def test_a_claim_too_large_for_the_capacity_is_made_again_smaller() -> None:
    capacity = {"storageClassName": "sc", "capacity": "989560464998400"}
    seen = _pending(leases=[LIVE], capacities=[capacity], object=_claim("1Pi"))
    diagnosis = diagnose(seen)
    assert diagnosis.blocker == "capacity-exhausted"
    assert diagnosis.summary == (
        "not enough capacity for class sc on any topology segment: 900Ti, 1Pi requested"
    )
    assert "capacity for class sc on any topology segment: at most 900Ti, 1Pi requested" in (
        diagnosis.evidence
    )
    assert "delete the claim and make a new one" in diagnosis.next_steps[-1]
    assert "cannot be lowered" in diagnosis.next_steps[-1]


def test_a_driver_out_of_space_is_told_the_same_way() -> None:
    event = {"type": "Warning", "reason": "ProvisioningFailed", "lastTimestamp": "x",
             "message": "rpc error: code = ResourceExhausted desc = no room"}  # fmt: skip
    diagnosis = diagnose(_pending(leases=[LIVE], events=[event], object=_claim("5Ti")))
    assert diagnosis.blocker == "createvolume-exhausted"
    assert diagnosis.summary.startswith("the driver is out of space (5Ti requested): ")
    assert not any(step.endswith("ask for less") for step in diagnosis.next_steps)
    assert "delete the claim and make a new one" in diagnosis.next_steps[-1]


def test_an_operator_serving_another_provisioner_adds_to_the_answer_without_it() -> None:
    without = diagnose(_pending("nobody.example.com"))
    state = {"provisioners": ["hostpath.csi.kopf.dev"], "standby": False}
    asked = diagnose(_pending("nobody.example.com", operator=state))
    assert asked.blocker == without.blocker == "provisioner-unserved"
    assert asked.summary == without.summary
    assert "does not serve" not in asked.summary
    assert "operator: serves hostpath.csi.kopf.dev, not nobody.example.com" in asked.evidence
    assert asked.next_steps[0].startswith("check the class: its provisioner must be the name")
    assert "the operator asked serves hostpath.csi.kopf.dev" in asked.next_steps[0]
    assert "ask another one where the claim stands" in " ".join(asked.next_steps)
    # A standby serves nothing until it leads: that is not "serves nothing, not X".
    standby = diagnose(_pending(operator={"provisioners": [], "standby": True}))
    assert not any(fact.startswith("operator: serves") for fact in standby.evidence)


def _snapshot(class_name: str | None = None, *, classes: list[dict[str, Any]]) -> Observed:
    spec: dict[str, Any] = {"source": {"persistentVolumeClaimName": "data"}}
    if class_name:
        spec["volumeSnapshotClassName"] = class_name
    snapshot = {"metadata": {"name": "snap", "namespace": "ns"}, "spec": spec}
    claim = {**_claim(), "status": {"phase": "Bound"}}
    volume = {"metadata": {"name": "pv"}, "spec": {"csi": {"driver": "d.example.com"}}}
    target = Target("volumesnapshot", "snap", "ns")
    return Observed(
        target=target, now=NOW, object=snapshot, source=claim, volume=volume,
        snapshot_classes=classes,
    )  # fmt: skip


def _class(name: str, driver: str = "d.example.com", **annotations: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "annotations": annotations}, "driver": driver}


@pytest.mark.parametrize(
    ("class_name", "classes", "blocker", "says"),
    [
        (None, [], "snapshotclass-none",
         "the snapshot names no VolumeSnapshotClass and d.example.com has no default one"),
        (None, [_class("plain"), _class("theirs", "other.example.com", **DEFAULT)],
         "snapshotclass-none",
         "the snapshot names no VolumeSnapshotClass and d.example.com has no default one"),
        (None, [_class("a", **DEFAULT), _class("b", **DEFAULT)], "snapshotclass-ambiguous",
         "the snapshot names no VolumeSnapshotClass and d.example.com has 2 default ones (a, b):"
         " the snapshot-controller picks none"),
        ("gone", [_class("a", **DEFAULT)], "snapshotclass-missing",
         'VolumeSnapshotClass "gone" not found'),
        (None, [_class("a", **DEFAULT)], "unbound", "no VolumeSnapshotContent is bound yet"),
    ],
)  # fmt: skip
def test_a_snapshot_without_a_class(
    class_name: str | None, classes: list[dict[str, Any]], blocker: str, says: str
) -> None:
    diagnosis = diagnose(_snapshot(class_name, classes=classes))
    assert (diagnosis.blocker, diagnosis.summary) == (blocker, says)
    if blocker == "snapshotclass-none":
        assert "source claim ns/data: Bound, driver d.example.com" in diagnosis.evidence
        assert "snapshot.storage.kubernetes.io/is-default-class" in diagnosis.next_steps[0]
    if blocker == "unbound":
        assert (
            "VolumeSnapshotClass: none named; a is the default for d.example.com"
            in diagnosis.evidence
        )


def test_what_answered_instead_of_the_operator() -> None:
    page = (
        "<html><head><title>404 Not Found</title></head><body><h1>Not Found</h1>"
        "<p>The requested URL was not found on this server.</p>" + "x" * 500 + "</body></html>"
    )
    said = reading.foreign_answer("http://h:1", 404, "Not Found", page)
    assert said.startswith('http://h:1 answered 404 Not Found: "404 Not Found Not Found The')
    assert "...\"; not kopf-csi's endpoint: --operator takes the operator's --http-endpoint" in (
        said
    )
    assert "<" not in said
    assert "xxxxxxxx" not in said  # cut at a word, not mid-text
    assert reading.excerpt("  a\n\n b &amp; c ") == "a b & c"


@pytest.fixture
async def not_the_operator() -> AsyncIterator[str]:
    """An HTTP server that answers everything with an HTML 404 (some other service's port)."""

    async def not_found(_: web.Request) -> web.Response:
        return web.Response(
            status=404, content_type="text/html",
            text="<html><body><h1>Not Found</h1><p>Nothing here. " + "y" * 300 + "</p></body>",
        )  # fmt: skip

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", not_found)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}"
    await runner.cleanup()


async def test_explains_refusals_and_what_answered(
    cluster: EmulatedCluster, kubeconfig: pathlib.Path, not_the_operator: str
) -> None:
    cluster.create(
        "persistentvolumeclaims",
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
         "metadata": {"name": "data", "namespace": "team"},
         "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "none",
                  "resources": {"requests": {"storage": "1Mi"}}}},
    )  # fmt: skip
    config = ("--kubeconfig", str(kubeconfig))
    run = await run_explain("pvc/team/data", *config, "--operator", not_the_operator)
    assert run.code == 1, run
    (fact,) = [line for line in run.stdout.splitlines() if "operator:" in line]
    assert fact.strip().startswith(f"operator: {not_the_operator} answered 404 Not Found:")
    assert "not reachable" not in fact
    assert "not kopf-csi's endpoint" in fact
    assert "yyyyyyyy" not in fact

    refusals = {
        ("pvc/team/data", "--operator", "localhost:34243"): (
            "argument --operator: localhost:34243 is not a URL: http:// is missing"
            " (--operator http://localhost:34243)"
        ),
        ("pvc/team/data", "--context", "nosuch"): (
            f'the kubeconfig {kubeconfig} has no context "nosuch": `kubectl config get-contexts'
            f" --kubeconfig {kubeconfig}` lists those it has"
        ),
        ("pvc/team/data", "-n", "other"): (
            "pvc/team/data names namespace team, -n names other: give one (pvc/team/data, or"
            " pvc/data -n other)"
        ),
    }
    for args, line in refusals.items():
        run = await run_explain(*args, *config)
        assert run.code == 2, run
        assert run.stdout == ""
        (said,) = run.stderr.splitlines()
        assert said.startswith(f"kopf-csi explain: error: {line}"), said
    run = await run_explain("pvc/data", "-n", "team", *config)  # one namespace: explained
    assert run.code == 1, run


async def test_a_snapshot_whose_driver_has_no_default_class(
    cluster: EmulatedCluster, kubeconfig: pathlib.Path
) -> None:
    cluster.create(
        "persistentvolumes",
        {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv-1"},
         "spec": {"capacity": {"storage": "1Mi"}, "accessModes": ["ReadWriteOnce"],
                  "claimRef": {"namespace": "team", "name": "data"},
                  "csi": {"driver": "d.example.com", "volumeHandle": "v1"}}},
    )  # fmt: skip
    cluster.create(
        "persistentvolumeclaims",
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
         "metadata": {"name": "data", "namespace": "team"},
         "spec": {"accessModes": ["ReadWriteOnce"], "volumeName": "pv-1",
                  "resources": {"requests": {"storage": "1Mi"}}}},
    )  # fmt: skip
    cluster.patch("persistentvolumeclaims", "team", "data", {"status": {"phase": "Bound"}},
                  subresource="status")  # fmt: skip
    cluster.create(
        "volumesnapshots",
        {"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot",
         "metadata": {"name": "snap", "namespace": "team"},
         "spec": {"source": {"persistentVolumeClaimName": "data"}}},
    )  # fmt: skip
    run = await run_explain("vs/team/snap", "--kubeconfig", str(kubeconfig))
    assert run.code == 1, run
    assert run.stdout.splitlines()[0] == (
        "BLOCKED: volumesnapshot/team/snap: the snapshot names no VolumeSnapshotClass and"
        " d.example.com has no default one"
    )


async def test_kubectl_csi_alone_lists_its_commands() -> None:
    plugin = str(pathlib.Path(sys.executable).parent / "kubectl-csi")
    for args, code in (((), 2), (("--help",), 0), (("nosuch",), 2)):
        process = await asyncio.create_subprocess_exec(
            plugin, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        stdout, stderr = await asyncio.wait_for(process.communicate(), 60)
        assert process.returncode == code
        usage = (stdout if code == 0 else stderr).decode()
        if args == ("nosuch",):
            first, _, usage = usage.partition("\n")
            assert first == "kubectl csi: error: unknown command 'nosuch'"
        assert usage.startswith("usage: kubectl csi COMMAND ..."), usage
        assert "\n  explain  say why" in usage
        assert "\n  migrate  rewrite" in usage
        assert "required: command" not in usage
