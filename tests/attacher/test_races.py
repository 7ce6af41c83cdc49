"""Races of the attacher with other writers, as a real API server produces them, end to end.

On a real server other controllers write a PV and its VolumeAttachments between our read and
our write (the PV and pv-protection controllers, the provisioner, the attach/detach
controller). `Faults.lose_race` makes such a write just before ours; a write guarded by the
version read would get the real 409, a JSON patch's failed `test` the real bare 422. The
attacher's metadata writes are strategic merge patches of single items, which the server
merges into what it holds: they have no race to lose. We test these aspects:
- every metadata write of an attach and a detach (the PV finalizer added, the VA's finalizer
  and node ID before ControllerPublish, the VA's finalizer after ControllerUnpublish, the PV
  finalizer removed from a deleted PV) written over by another writer just before: no warning
  line, no Warning event, no attach or detach error, no queue retry, one ControllerPublish
  and one ControllerUnpublish, the other writer's change kept, and the end state right;
- a PV finalizer removal whose PV other writers change meanwhile goes in one patch, with no
  re-read (the attacher's patches are strategic: they have no race to lose);
- a patch the server refuses for itself (the bare 422, with no other writer) is a real error:
  an `attach_failed` warning and an `attachError`, then a retry that succeeds;
- a burst of claims attached to pods, then deleted all at once with their pods while
  kube-controller-manager writes the same PVs and VAs: every volume goes, each published,
  unpublished and deleted once, with no warning line, no Warning event and no failure metric.
"""

from __future__ import annotations

import json
import pathlib

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kopf_csi.driver import Driver
from kopf_csi.testing import apimachinery
from kopf_csi.testing.emulator import OTHER_WRITER, EmulatedCluster
from kopf_csi.testing.kcm import FINALIZER_PV_PROTECTION as PV_PROTECTION
from kopf_csi.testing.kcm import ControllerManager
from kopf_csi.testing.operator import OperatorThread
from kopf_csi.testing.pytest_plugin import seed_node as seed_cluster_node
from kopf_csi.testing.spies import Calls

from ..provisioner.conftest import make_claim, make_pod, make_storage_class, wait_until
from .helpers import FINALIZER, attached_volume, attachment, seed_node, status, until, va

QUEUES = ("attach", "detach", "attacher-volumes")
OTHER_ANNOTATION = "testing.kopf-csi.dev/other-writer"  # `Faults.lose_race`'s edit


def _finalizers(cluster: EmulatedCluster, name: str) -> list[str] | None:
    pv = cluster.get("persistentvolumes", None, name)
    return None if pv is None else list(pv["metadata"].get("finalizers") or [])


def _warning_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if "[warning" in line or "[error" in line]


def _warning_events(cluster: EmulatedCluster) -> list[tuple[str, str]]:
    return [
        (e["reason"], e["message"]) for e in cluster.objects("events") if e["type"] == "Warning"
    ]


def _metric(operator: OperatorThread, name: str) -> dict[str, float]:
    """The samples of one metric, by their label values."""
    text = operator.memo.metrics.exposition().decode()
    return {
        ",".join(sample.labels.values()): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    }


def _errors(changes: list[dict[str, object]]) -> list[object]:
    found = []
    for obj in changes:
        current = obj.get("status") or {}
        assert isinstance(current, dict)
        found += [current[k] for k in ("attachError", "detachError") if current.get(k)]
    return found


async def test_every_write_of_an_attach_and_a_detach_written_over_by_others_goes_quietly(
    cluster: EmulatedCluster,
    driver: Driver,
    socket_path: pathlib.Path,
    operator: OperatorThread,
    calls: Calls,
    capsys: pytest.CaptureFixture[str],
) -> None:
    seed_node(cluster)
    handle, _ = await attached_volume(cluster, socket_path, "pv-1")
    await until(lambda: "pv-1" in operator.memo.caches.volumes)
    # Someone writes the PV before our finalizer goes on, and the VA before our finalizer and
    # node ID go on (the first write of each; the status has a subresource of its own).
    cluster.faults.lose_race("persistentvolumes", "pv-1")
    cluster.faults.lose_race("volumeattachments", "va-1")
    with cluster.subscribe("volumeattachments") as feed:
        cluster.create("volumeattachments", attachment("va-1", "pv-1"))
        await until(lambda: status(cluster, "va-1").get("attached"))
        assert not cluster.faults  # both races were lost
        assert va(cluster, "va-1")["metadata"]["finalizers"] == [FINALIZER]
        assert _finalizers(cluster, "pv-1") == [PV_PROTECTION, FINALIZER]
        for obj in (va(cluster, "va-1"), cluster.get("persistentvolumes", None, "pv-1") or {}):
            assert OTHER_ANNOTATION in obj["metadata"]["annotations"]  # theirs is kept

        # Someone writes the VA before our finalizer goes after ControllerUnpublish.
        cluster.faults.lose_race("volumeattachments", "va-1")
        cluster.delete("volumeattachments", None, "va-1")
        await until(lambda: not va(cluster, "va-1"))
        assert not cluster.faults
        changes = []
        while feed.pending:
            changes += [change.object for change in await feed.batch()]

    # Someone writes the deleted PV before our finalizer goes.
    cluster.faults.lose_race("persistentvolumes", "pv-1")
    cluster.delete("persistentvolumes", None, "pv-1")
    await until(lambda: _finalizers(cluster, "pv-1") == [PV_PROTECTION])  # no kcm: it stays
    assert not cluster.faults
    assert cluster.writes[OTHER_WRITER, "update", "persistentvolumes"] == 2
    assert cluster.writes[OTHER_WRITER, "update", "volumeattachments"] == 2

    assert calls.count("ControllerPublishVolume") == 1
    assert calls.count("ControllerUnpublishVolume") == 1
    assert not driver.state.volumes[handle].attachments
    assert _errors(changes) == []
    await operator.flush_events()
    assert _warning_events(cluster) == []
    assert _warning_lines(capsys.readouterr().out) == []
    retries = _metric(operator, "workqueue_retries_total")
    assert {queue: retries[queue] for queue in QUEUES} == dict.fromkeys(QUEUES, 0.0)


async def test_a_volume_finalizer_written_over_by_others_goes_in_one_patch(
    cluster: EmulatedCluster,
    driver: Driver,
    socket_path: pathlib.Path,
    operator: OperatorThread,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Other writers write the deleted PV between our read and our write: the strategic patch
    has no race to lose, so our finalizer goes with one PATCH and no re-read (a guarded merge
    patch of the list lost a third of these races under churn, a GET and a PATCH each)."""
    seed_node(cluster)
    await attached_volume(cluster, socket_path, "pv-1")
    cluster.create("volumeattachments", attachment("va-1", "pv-1"))
    await until(lambda: status(cluster, "va-1").get("attached"))
    cluster.delete("volumeattachments", None, "va-1")
    await until(lambda: not va(cluster, "va-1"))
    patches = cluster.requests.count(verb="patch", resource="persistentvolumes")
    race = cluster.faults.lose_race("persistentvolumes", "pv-1")
    cluster.delete("persistentvolumes", None, "pv-1")
    await until(lambda: _finalizers(cluster, "pv-1") == [PV_PROTECTION])
    assert race.times == 0
    assert cluster.writes[OTHER_WRITER, "update", "persistentvolumes"] == 1
    assert cluster.requests.count(verb="patch", resource="persistentvolumes") == patches + 1
    assert cluster.requests.count(verb="get", resource="persistentvolumes") == 0
    assert _warning_lines(capsys.readouterr().out) == []


async def test_a_patch_the_server_refuses_is_a_real_error(
    cluster: EmulatedCluster,
    driver: Driver,
    socket_path: pathlib.Path,
    operator: OperatorThread,
    calls: Calls,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The bare 422 with nobody else writing (an admission webhook, a bad patch): reported."""
    seed_node(cluster)
    await attached_volume(cluster, socket_path, "pv-1")
    await until(lambda: "pv-1" in operator.memo.caches.volumes)
    refusal = json.dumps(apimachinery.rejected().status(), separators=(",", ":"))
    cluster.faults.add(422, verb="patch", resource="persistentvolumes", body=refusal)
    with cluster.subscribe("volumeattachments") as feed:
        cluster.create("volumeattachments", attachment("va-1", "pv-1"))
        await until(lambda: status(cluster, "va-1").get("attached"))  # retried, then attached
        changes = []
        while feed.pending:
            changes += [change.object for change in await feed.batch()]
    errors = _errors(changes)
    assert errors
    assert "the server rejected our request" in str(errors[0])
    lines = _warning_lines(capsys.readouterr().out)
    assert len(lines) == 1
    assert "attach_failed" in lines[0]
    assert "the server rejected our request due to an error in our request" in lines[0]
    assert calls.count("ControllerPublishVolume") == 1  # refused before it
    assert _metric(operator, "workqueue_retries_total")["attach"] == 1


BURST = 40


@pytest.fixture
def handler_modules() -> tuple[str, ...]:
    return (
        "kopf_csi_handlers.lifecycle",
        "kopf_csi_handlers.caches",
        "kopf_csi_handlers.provisioner",
        "kopf_csi_handlers.attacher",
    )


async def test_a_burst_of_attached_volumes_deleted_with_their_pods_loses_races_quietly(
    cluster: EmulatedCluster,
    kcm: ControllerManager,
    driver: Driver,
    operator: OperatorThread,
    calls: Calls,
    capsys: pytest.CaptureFixture[str],
) -> None:
    seed_cluster_node(cluster)  # the Node too, with its topology label
    await make_storage_class(cluster, operator)
    names = [f"data-{index}" for index in range(BURST)]
    for index, name in enumerate(names):
        make_claim(cluster, name)
        make_pod(cluster, f"app-{index}", name)

    def attached() -> int:
        return sum(
            bool((obj.get("status") or {}).get("attached"))
            for obj in cluster.objects("volumeattachments")
        )

    await wait_until(lambda: attached() == BURST, timeout=60, what="every volume attached")
    with cluster.subscribe("volumeattachments") as feed:
        # The pods go, and their volumes are detached; then the claims go, and the PVs are
        # deleted while kube-controller-manager writes them (the PV controller's phase, the
        # pv-protection finalizer) and the provisioner removes its finalizer.
        for index in range(BURST):
            cluster.delete("pods", "default", f"app-{index}")
        await wait_until(
            lambda: not cluster.objects("volumeattachments"), timeout=60, what="all detached"
        )
        for name in names:
            cluster.delete("persistentvolumeclaims", "default", name)
        await wait_until(
            lambda: not cluster.objects("persistentvolumes"), timeout=60, what="all PVs gone"
        )
        changes = []
        while feed.pending:
            changes += [change.object for change in await feed.batch()]
    assert not driver.state.volumes
    assert calls.count("ControllerPublishVolume") == BURST
    assert calls.count("ControllerUnpublishVolume") == BURST
    assert calls.count("DeleteVolume") == BURST
    assert _errors(changes) == []
    await operator.flush_events()
    assert _warning_events(cluster) == []
    out = capsys.readouterr().out
    raced = sum(" stale_read " in line or "_raced " in line for line in out.splitlines())
    print(f"{raced} guarded writes lost a race and were made again from a fresh read")
    assert cluster.requests.count(verb="get", resource="persistentvolumes") == 0
    assert cluster.requests.count(verb="get", resource="volumeattachments") == 0
    assert _warning_lines(out) == []
    assert not any(_metric(operator, "controller_persistentvolume_delete_failed_total").values())
    retries = _metric(operator, "workqueue_retries_total")
    assert all(retries[queue] == 0 for queue in QUEUES)
