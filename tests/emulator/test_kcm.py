"""The kube-controller-manager stand-in: what the operator relies on KCM for.

We test these aspects: the PV controller's provisioner annotations and ExternalProvisioning
event (Immediate and WaitForFirstConsumer classes, with the scheduler's selected-node, selected
again after kube-scheduler's back-off when the provisioner gives the node back), the
default class, binding a claim to a pre-bound volume, Available and Released volumes, Lost
claims, the attach/detach controller's VolumeAttachments (exact name, attachRequired), and the
pvc- and pv-protection controllers (their finalizers go only when nothing uses the object,
with a resourceVersion-guarded update, as kube-controller-manager), and a lost race (404, 409)
told at debug level only.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import logging
import types
from collections.abc import Callable
from typing import Any

import pytest

from kopf_csi.testing.apimachinery import StatusError
from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.kcm import (
    FINALIZER_PV_PROTECTION,
    FINALIZER_PVC_PROTECTION,
    ControllerManager,
    attachment_name,
    scheduler_backoff,
)
from kopf_csi.testing.kcmrunning import ControllerRunner, _Lane
from kopf_csi.testing.latency import LatencyModel

pytestmark = pytest.mark.usefixtures("kcm")

DRIVER = "csi.example.com"
PVCS, PVS, VAS = "persistentvolumeclaims", "persistentvolumes", "volumeattachments"
GA, BETA = (
    "volume.kubernetes.io/storage-provisioner",
    "volume.beta.kubernetes.io/storage-provisioner",
)
SELECTED_NODE = "volume.kubernetes.io/selected-node"
EXTERNAL_PROVISIONING = (
    "Waiting for a volume to be created either by the external provisioner 'csi.example.com' or "
    "manually by the system administrator. If volume creation is delayed, please verify that the "
    "provisioner is running and correctly registered."
)


async def until(cluster: EmulatedCluster, condition: Callable[[], Any]) -> Any:
    """Wait for a condition over the whole cluster, re-checked on every change."""
    async with asyncio.timeout(5):
        with cluster.subscribe() as feed:
            while not (result := condition()):
                await feed.batch()
    return result


async def polled(condition: Callable[[], Any]) -> None:
    """Wait for a condition that no change of the cluster announces (KCM's own state)."""
    async with asyncio.timeout(5):
        while True:
            if condition():
                return
            await asyncio.sleep(0.01)


def events(cluster: EmulatedCluster, obj: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [
        (event["type"], event["reason"], event["message"])
        for event in cluster.objects("events")
        if event["involvedObject"]["uid"] == obj["metadata"]["uid"]
    ]


def phase(value: str) -> Callable[[dict[str, Any] | None], bool]:
    return lambda obj: (obj or {}).get("status", {}).get("phase") == value


def storage_class(
    cluster: EmulatedCluster, name: str, default: bool = False, **fields: Any
) -> None:
    annotations = {"storageclass.kubernetes.io/is-default-class": "true"} if default else {}
    metadata = {"name": name, "annotations": annotations}
    cluster.create("storageclasses", {"metadata": metadata, "provisioner": DRIVER, **fields})


def claim(cluster: EmulatedCluster, name: str, **spec: Any) -> dict[str, Any]:
    spec = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}, **spec}
    return cluster.create(PVCS, {"metadata": {"name": name}, "spec": spec}, namespace="default")


def volume(
    cluster: EmulatedCluster, name: str, *, claim: dict[str, Any] | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "capacity": {"storage": "2Gi"},
        "persistentVolumeReclaimPolicy": "Delete",
        "csi": {"driver": DRIVER, "volumeHandle": f"handle-{name}"},
    }
    if claim is not None:
        meta = claim["metadata"]
        spec["claimRef"] = {
            "namespace": meta["namespace"],
            "name": meta["name"],
            "uid": meta["uid"],
        }
    annotations = {"pv.kubernetes.io/provisioned-by": DRIVER}
    return cluster.create(
        PVS, {"metadata": {"name": name, "annotations": annotations}, "spec": spec}
    )


def pod(cluster: EmulatedCluster, name: str, claim_name: str, node: str | None = None) -> None:
    spec: dict[str, Any] = {
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim_name}}]
    }
    if node:
        spec["nodeName"] = node
    cluster.create("pods", {"metadata": {"name": name}, "spec": spec}, namespace="default")


def annotations(cluster: EmulatedCluster, name: str) -> dict[str, str]:
    obj = cluster.get(PVCS, "default", name) or {}
    return dict(obj.get("metadata", {}).get("annotations") or {})


async def test_immediate_claim_gets_provisioner_annotations_and_an_event(
    cluster: EmulatedCluster,
) -> None:
    storage_class(cluster, "fast")
    created = claim(cluster, "data", storageClassName="fast")
    await until(cluster, lambda: events(cluster, created))
    assert annotations(cluster, "data") == {GA: DRIVER, BETA: DRIVER}
    assert events(cluster, created) == [("Normal", "ExternalProvisioning", EXTERNAL_PROVISIONING)]
    event = cluster.objects("events")[0]
    assert event["source"] == {"component": "persistentvolume-controller"}
    assert event["metadata"]["name"].startswith("data.")


async def test_wait_for_first_consumer_waits_for_the_selected_node(
    cluster: EmulatedCluster,
) -> None:
    storage_class(cluster, "local", volumeBindingMode="WaitForFirstConsumer")
    created = claim(cluster, "data", storageClassName="local")
    waiting = (
        "Normal",
        "WaitForFirstConsumer",
        "waiting for first consumer to be created before binding",
    )
    await until(cluster, lambda: waiting in events(cluster, created))
    assert annotations(cluster, "data") == {}

    pod(cluster, "app", "data")  # not scheduled yet
    scheduled = ("Normal", "WaitForPodScheduled", "waiting for pod app to be scheduled")
    await until(cluster, lambda: scheduled in events(cluster, created))
    assert annotations(cluster, "data") == {}

    cluster.patch("pods", "default", "app", {"spec": {"nodeName": "node-1"}})
    await until(cluster, lambda: GA in annotations(cluster, "data"))
    assert annotations(cluster, "data") == {SELECTED_NODE: "node-1", GA: DRIVER, BETA: DRIVER}
    await until(cluster, lambda: len(events(cluster, created)) == 3)
    assert events(cluster, created)[-1] == ("Normal", "ExternalProvisioning", EXTERNAL_PROVISIONING)


def test_the_schedulers_backoff_doubles_from_1_s_up_to_10_s() -> None:
    """kube-scheduler's defaults (podInitialBackoffSeconds 1, podMaxBackoffSeconds 10)."""
    assert [scheduler_backoff(failures) for failures in range(1, 7)] == [1, 2, 4, 8, 10, 10]
    assert [scheduler_backoff(failures, (0.25, 0.6)) for failures in (1, 2, 3)] == [
        0.25, 0.5, 0.6,
    ]  # fmt: skip


async def test_a_node_given_back_is_selected_again_after_the_schedulers_backoff() -> None:
    """The provisioner's reschedule removes selected-node: a failed attempt, which the
    scheduler retries after its back-off (here 0.3 s, then 0.6 s: the maximum), never at once."""
    async with (
        EmulatedCluster() as cluster,
        ControllerManager(cluster, scheduler_backoff=(0.3, 0.6)),
    ):
        storage_class(cluster, "local", volumeBindingMode="WaitForFirstConsumer")
        claim(cluster, "data", storageClassName="local")
        pod(cluster, "app", "data", node="node-1")
        loop = asyncio.get_running_loop()
        selected_at: list[float] = []
        async with asyncio.timeout(20):
            with cluster.subscribe(PVCS) as feed:
                while len(selected_at) < 4:
                    if SELECTED_NODE in annotations(cluster, "data"):
                        selected_at.append(loop.time())
                        give_back = {"metadata": {"annotations": {SELECTED_NODE: None}}}
                        cluster.patch(PVCS, "default", "data", give_back)  # the reschedule
                    await feed.batch()
        waits = [later - earlier for earlier, later in itertools.pairwise(selected_at)]
        assert waits[0] >= 0.3, waits
        assert all(wait >= 0.6 for wait in waits[1:]), waits


async def test_claims_without_a_class_get_the_default_one(cluster: EmulatedCluster) -> None:
    storage_class(cluster, "plain")
    storage_class(cluster, "default", default=True)
    claim(cluster, "data")
    got = await cluster.wait_for(
        PVCS, "default", "data", lambda obj: GA in (obj or {})["metadata"].get("annotations", {})
    )
    assert got is not None
    assert got["spec"]["storageClassName"] == "default"


async def test_a_volume_with_a_claim_ref_binds_the_claim(cluster: EmulatedCluster) -> None:
    storage_class(cluster, "fast")
    created = claim(cluster, "data", storageClassName="fast")
    volume(cluster, "pvc-1", claim=created)
    volume(cluster, "spare")

    bound = await cluster.wait_for(PVCS, "default", "data", phase("Bound"))
    assert bound is not None
    assert bound["spec"]["volumeName"] == "pvc-1"
    assert bound["status"] == {
        "phase": "Bound",
        "accessModes": ["ReadWriteOnce"],
        "capacity": {"storage": "2Gi"},
    }
    assert bound["metadata"]["annotations"]["pv.kubernetes.io/bind-completed"] == "yes"
    assert bound["metadata"]["annotations"]["pv.kubernetes.io/bound-by-controller"] == "yes"

    pv = await cluster.wait_for(PVS, None, "pvc-1", phase("Bound"))
    assert pv is not None
    assert pv["spec"]["claimRef"]["uid"] == created["metadata"]["uid"]
    assert "pv.kubernetes.io/bound-by-controller" not in pv["metadata"]["annotations"]  # pre-bound
    spare = await cluster.wait_for(PVS, None, "spare", phase("Available"))
    assert spare is not None


async def test_a_volume_whose_claim_is_gone_is_released(
    cluster: EmulatedCluster, kcm: ControllerManager
) -> None:
    created = claim(cluster, "data", storageClassName="fast")
    volume(cluster, "pvc-1", claim=created)
    await cluster.wait_for(PVS, None, "pvc-1", phase("Bound"))
    cluster.delete(PVCS, "default", "data")
    released = await cluster.wait_for(PVS, None, "pvc-1", phase("Released"))
    assert released is not None

    # A Bound volume that is deleted stays while it is Bound (pv-protection). Once it
    # disappears anyway (an admin removed the finalizer), its claim is Lost.
    again = claim(cluster, "again", storageClassName="fast")
    volume(cluster, "pvc-2", claim=again)
    await cluster.wait_for(PVCS, "default", "again", phase("Bound"))
    cluster.delete(PVS, None, "pvc-2")
    await kcm.settled()
    protected = cluster.get(PVS, None, "pvc-2")
    assert protected is not None
    assert protected["metadata"]["finalizers"] == [FINALIZER_PV_PROTECTION]
    cluster.patch(PVS, None, "pvc-2", {"metadata": {"finalizers": None}})
    lost = await cluster.wait_for(PVCS, "default", "again", phase("Lost"))
    assert lost is not None
    message = "Bound claim has lost its PersistentVolume. Data on the volume is lost!"
    assert ("Warning", "ClaimLost", message) in events(cluster, again)


def test_attachment_name_is_csi_sha256_of_handle_driver_node() -> None:
    expected = "csi-" + hashlib.sha256(b"handle-pvc-1" + b"csi.example.com" + b"node-1").hexdigest()
    assert attachment_name("handle-pvc-1", DRIVER, "node-1") == expected
    assert len(expected) == 68


async def test_pods_on_nodes_get_volume_attachments(cluster: EmulatedCluster) -> None:
    created = claim(cluster, "data", storageClassName="fast")
    volume(cluster, "pvc-1", claim=created)
    await cluster.wait_for(
        PVCS, "default", "data", lambda obj: (obj or {}).get("spec", {}).get("volumeName")
    )
    pod(cluster, "unscheduled", "data")
    pod(cluster, "app", "data", node="node-1")
    name = attachment_name("handle-pvc-1", DRIVER, "node-1")

    attachment = await cluster.wait_for(VAS, None, name)
    assert attachment is not None
    assert attachment["spec"] == {
        "attacher": DRIVER,
        "nodeName": "node-1",
        "source": {"persistentVolumeName": "pvc-1"},
    }
    assert len(cluster.objects(VAS)) == 1

    cluster.delete("pods", "default", "app")
    assert await cluster.wait_for(VAS, None, name, lambda obj: obj is None) is None


async def test_drivers_without_attach_get_no_attachments(
    cluster: EmulatedCluster, kcm: ControllerManager
) -> None:
    cluster.create("csidrivers", {"metadata": {"name": DRIVER}, "spec": {"attachRequired": False}})
    created = claim(cluster, "data", storageClassName="fast")
    volume(cluster, "pvc-1", claim=created)
    pod(cluster, "app", "data", node="node-1")
    await cluster.wait_for(PVCS, "default", "data", phase("Bound"))
    await kcm.settled()
    assert cluster.objects(VAS) == []


async def test_a_deleted_claim_keeps_its_protection_while_a_pod_uses_it(
    cluster: EmulatedCluster, kcm: ControllerManager
) -> None:
    created = claim(cluster, "data", storageClassName="fast")
    assert created["metadata"]["finalizers"] == [FINALIZER_PVC_PROTECTION]  # admission
    pod = {
        "metadata": {"name": "app"},
        "spec": {"volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "data"}}]},
    }
    cluster.create("pods", pod, namespace="default")
    cluster.delete(PVCS, "default", "data")
    await kcm.settled()
    held = cluster.get(PVCS, "default", "data")
    assert held is not None
    assert held["metadata"]["deletionTimestamp"]
    assert held["metadata"]["finalizers"] == [FINALIZER_PVC_PROTECTION]

    cluster.delete("pods", "default", "app")
    await cluster.wait_for(PVCS, "default", "data", lambda obj: obj is None)


async def test_protection_finalizers_go_with_a_guarded_update_by_kcm(
    cluster: EmulatedCluster, kcm: ControllerManager
) -> None:
    created = volume(cluster, "pvc-1")
    assert created["metadata"]["finalizers"] == [FINALIZER_PV_PROTECTION]
    other = "example.com/other"
    cluster.patch(
        PVS, None, "pvc-1", {"metadata": {"finalizers": [FINALIZER_PV_PROTECTION, other]}}
    )
    cluster.delete(PVS, None, "pvc-1")
    unprotected = await cluster.wait_for(
        PVS, None, "pvc-1", lambda obj: (obj or {})["metadata"].get("finalizers") == [other]
    )
    assert unprotected is not None
    assert unprotected["metadata"]["deletionTimestamp"]
    managers = {e["manager"]: e for e in unprotected["metadata"]["managedFields"]}
    assert "f:finalizers" in managers["kube-controller-manager"]["fieldsV1"]["f:metadata"]


def kcm_writes(cluster: EmulatedCluster) -> dict[tuple[str, str], int]:
    return {
        (verb, resource): n
        for (manager, verb, resource), n in cluster.writes.items()
        if manager == "kube-controller-manager" and n
    }


async def test_a_provisioned_volume_gets_the_real_servers_writes_and_watch_events(
    cluster: EmulatedCluster, kcm: ControllerManager
) -> None:
    await a_volume_gets_the_real_servers_writes_and_watch_events(cluster, kcm)


async def a_volume_gets_the_real_servers_writes_and_watch_events(
    cluster: EmulatedCluster, kcm: ControllerManager
) -> None:
    # real-apiserver.md, "Watch traffic per volume": KCM updates (PUT) the claim twice and its
    # status once, and the PV's status, while a volume is provisioned; on deletion it updates
    # the PV's status (Released), and each protection controller updates its object once.
    storage_class(cluster, "fast")
    with cluster.subscribe(PVCS, PVS) as feed:
        created = claim(cluster, "data", storageClassName="fast")
        await until(cluster, lambda: GA in annotations(cluster, "data"))
        provisioned = volume(cluster, "pvc-1", claim=created)
        assert provisioned["metadata"]["finalizers"] == [FINALIZER_PV_PROTECTION]
        await cluster.wait_for(PVCS, "default", "data", phase("Bound"))
        await kcm.settled()
        assert kcm_writes(cluster) == {
            ("create", "events"): 1,
            ("update", PVCS): 2,
            ("update", f"{PVCS}/status"): 1,
            ("update", f"{PVS}/status"): 1,
        }
        assert events(cluster, created) == [
            ("Normal", "ExternalProvisioning", EXTERNAL_PROVISIONING)
        ]
        cluster.writes.clear()

        cluster.delete(PVCS, "default", "data")
        await cluster.wait_for(PVS, None, "pvc-1", phase("Released"))
        cluster.delete(PVS, None, "pvc-1", manager="csi-provisioner")
        await cluster.wait_for(PVS, None, "pvc-1", lambda obj: obj is None)
        await kcm.settled()
        assert kcm_writes(cluster) == {
            ("update", PVCS): 1,
            ("update", PVS): 1,
            ("update", f"{PVS}/status"): 1,
        }
        assert cluster.writes["csi-provisioner", "delete", PVS] == 1
        changes = []
        while feed.pending:
            changes += await feed.batch()
    # Each claim and PV change reaches a watcher as one event: about 6 of each, as measured.
    claim_changes = [c.type for c in changes if c.kind.plural == PVCS]
    volume_changes = [c.type for c in changes if c.kind.plural == PVS]
    assert claim_changes == ["ADDED"] + ["MODIFIED"] * 4 + ["DELETED"]
    assert volume_changes == ["ADDED"] + ["MODIFIED"] * 3 + ["DELETED"]  # + its own finalizer


async def test_a_resync_posts_a_pending_claims_event_again_as_a_patch(
    cluster: EmulatedCluster, kcm: ControllerManager
) -> None:
    """KCM's PV controller syncs every claim again at each resync (15 s by default); a claim
    still waiting for its provisioner gets ExternalProvisioning again, which client-go's
    correlator sends as a PATCH of the first event (`count` 2, 3, ...). A bound claim does
    not. This is where a slow provisioner's extra event PATCHes come from."""
    storage_class(cluster, "fast")
    waiting = claim(cluster, "waiting", storageClassName="fast")
    bound = claim(cluster, "bound", storageClassName="fast")
    await until(cluster, lambda: GA in annotations(cluster, "bound"))
    volume(cluster, "pvc-bound", claim=bound)
    await cluster.wait_for(PVCS, "default", "bound", phase("Bound"))
    await kcm.settled()
    cluster.writes.clear()
    await kcm.resync()
    await kcm.resync()
    await kcm.settled()
    counts = {
        e["involvedObject"]["name"]: e["count"]
        for e in cluster.objects("events")
        if e["reason"] == "ExternalProvisioning"
    }
    assert counts == {"waiting": 3, "bound": 1}
    assert kcm_writes(cluster) == {("patch", "events"): 2}
    assert events(cluster, waiting) == [
        ("Normal", "ExternalProvisioning", EXTERNAL_PROVISIONING)
    ]  # one event, counted


async def test_an_object_that_fails_is_synced_again_and_the_pass_goes_on(
    cluster: EmulatedCluster, kcm: ControllerManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failure on one object (a stale cache's 409, or a bug) neither stops the rest of the
    pass nor forgets the object: it is synced again at the next pass."""
    storage_class(cluster, "fast")
    await kcm.settled()
    original, failed = kcm._sync_claim, []

    async def flaky(obj: dict[str, Any]) -> None:
        if obj["metadata"]["name"] == "a" and not failed:
            failed.append(obj["metadata"]["name"])
            raise RuntimeError("a bug")
        await original(obj)

    monkeypatch.setattr(kcm, "_sync_claim", flaky)
    claim(cluster, "a", storageClassName="fast")
    claim(cluster, "b", storageClassName="fast")
    await until(cluster, lambda: GA in annotations(cluster, "b"))
    assert failed == ["a"]
    storage_class(cluster, "other")  # any change: the next pass
    await until(cluster, lambda: GA in annotations(cluster, "a"))


async def test_a_pass_syncs_what_changed_not_the_whole_cluster(
    cluster: EmulatedCluster, kcm: ControllerManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real PV controller works through queues of changed objects: a change to one claim
    syncs that claim and its volume, not every claim and volume in the cluster."""
    storage_class(cluster, "fast")
    for n in range(20):
        created = claim(cluster, f"data-{n}", storageClassName="fast")
        await until(cluster, lambda n=n: GA in annotations(cluster, f"data-{n}"))
        volume(cluster, f"pvc-{n}", claim=created)
    await until(cluster, lambda: all(phase("Bound")(c) for c in cluster.objects(PVCS)))
    await kcm.settled()
    synced: list[str] = []
    for method in ("_sync_claim", "_sync_volume"):
        original = getattr(kcm, method)

        async def spy(obj: dict[str, Any], original: Any = original) -> None:
            synced.append(obj["metadata"]["name"])
            await original(obj)

        monkeypatch.setattr(kcm, method, spy)
    cluster.patch(PVCS, "default", "data-7", {"metadata": {"labels": {"app": "x"}}})
    await kcm.settled()
    assert sorted(set(synced)) == ["data-7", "pvc-7"]


# --- With a latency model: KCM's workers, each write taking its time ---------------------


async def test_with_a_latency_model_the_claim_worker_binds_one_claim_at_a_time() -> None:
    """pv_controller_base.go runs one claim worker, and `bind` makes its writes one blocking
    round trip after the other: N claims' last status writes cannot land sooner than N times
    one write's duration after their volumes appear (side by side: once)."""
    n, seconds = 4, 0.15
    model = LatencyModel(means={f"PUT {PVCS}/status": seconds})
    async with EmulatedCluster(latency=model) as cluster, ControllerManager(cluster) as kcm:
        assert kcm.timed
        storage_class(cluster, "fast")
        claims = [claim(cluster, f"data-{i}", storageClassName="fast") for i in range(n)]
        await until(cluster, lambda: all(GA in annotations(cluster, c) for c in _names(claims)))
        loop = asyncio.get_running_loop()
        started = loop.time()
        for i, created in enumerate(claims):
            volume(cluster, f"pvc-{i}", claim=created)
        await until(cluster, lambda: all(phase("Bound")(c) for c in cluster.objects(PVCS)))
        assert loop.time() - started >= n * seconds  # in turn (side by side: about 0.15 s)
        await kcm.settled()
        assert kcm_writes(cluster)[("update", f"{PVCS}/status")] == n


async def test_with_a_latency_model_provisioning_requests_go_out_side_by_side() -> None:
    """provisionClaim hands the annotations' update to an operation of its own
    (scheduleOperation: a goroutine per claim), so N claims' annotations overlap."""
    n, seconds = 4, 1.0
    model = LatencyModel(means={f"PUT {PVCS}": seconds})
    async with EmulatedCluster(latency=model) as cluster, ControllerManager(cluster):
        storage_class(cluster, "fast")
        loop = asyncio.get_running_loop()
        started = loop.time()
        claims = [claim(cluster, f"data-{i}", storageClassName="fast") for i in range(n)]
        await until(cluster, lambda: all(GA in annotations(cluster, c) for c in _names(claims)))
        waited = loop.time() - started
        assert seconds <= waited < n * seconds - 1.5  # each its own time, together (not 4 s)
        await until(cluster, lambda: all(events(cluster, c) for c in claims))


async def test_with_a_latency_model_a_volume_gets_the_same_writes() -> None:
    """The workers and operations change when KCM's writes land, not which: a claim's
    provisioning, binding, release and both protection finalizers, as without a model."""
    model = LatencyModel(write=0.02, read=0.01)
    async with EmulatedCluster(latency=model) as cluster, ControllerManager(cluster) as kcm:
        await a_volume_gets_the_real_servers_writes_and_watch_events(cluster, kcm)


async def test_without_a_latency_model_a_pass_binds_every_claim_at_once(
    cluster: EmulatedCluster, kcm: ControllerManager
) -> None:
    """No model (every other test): no workers, and a pass is atomic, as before: the
    bindings of all the claims whose volumes appeared together reach a watcher in one batch."""
    assert not kcm.timed
    storage_class(cluster, "fast")
    claims = [claim(cluster, f"data-{i}", storageClassName="fast") for i in range(4)]
    await until(cluster, lambda: all(GA in annotations(cluster, c) for c in _names(claims)))
    await kcm.settled()
    with cluster.subscribe(PVCS) as feed:
        for i, created in enumerate(claims):
            volume(cluster, f"pvc-{i}", claim=created)
        batches = []
        while len(bound := [c for b in batches for c in b if phase("Bound")(c.object)]) < 4:
            batches.append(await feed.batch())
    assert len({id(b) for b in batches for c in b if phase("Bound")(c.object)}) == 1
    assert len(bound) == 4


def _names(claims: list[dict[str, Any]]) -> list[str]:
    return [c["metadata"]["name"] for c in claims]


async def test_a_failing_scheduler_pass_leaves_the_rest_of_the_pass(
    cluster: EmulatedCluster, kcm: ControllerManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scheduler and the attach/detach controller look at every pod; one of them failing
    (a stale claim's 409, a VolumeAttachment already gone) must not cost the claims and
    volumes of that pass their sync, which would then wait for another change."""
    storage_class(cluster, "fast")
    await kcm.settled()
    failed: list[str] = []

    async def broken() -> None:
        failed.append("scheduler")
        raise RuntimeError("a bug")

    monkeypatch.setattr(kcm, "_sync_scheduler", broken)
    claim(cluster, "a", storageClassName="fast")
    await until(cluster, lambda: GA in annotations(cluster, "a"))
    assert failed


async def test_with_a_latency_model_a_pod_gone_during_its_attach_still_gets_a_detach() -> None:
    """KCM's attach operation ends by putting the volume in the actual state of the world
    (attached, or uncertain if it failed), which the reconciler detaches once the pods no
    longer need it: a pod deleted while the VolumeAttachment's POST is on its way still gets
    it deleted once it lands. The stand-in forgot it instead (its cache had no such
    VolumeAttachment yet), which left it for good: its PV stayed "still attached to node"
    in the churn benchmark, 22 of 1,800 claims at `--attached 1.0` on a busy machine."""
    model = LatencyModel(means={f"POST {VAS}": 0.5})
    async with EmulatedCluster(latency=model) as cluster, ControllerManager(cluster) as kcm:
        storage_class(cluster, "fast")
        created = claim(cluster, "data", storageClassName="fast")
        volume(cluster, "pvc-1", claim=created)
        await until(cluster, lambda: phase("Bound")(cluster.get(PVCS, "default", "data")))
        pod(cluster, "app", "data", node="node-1")
        name = attachment_name("handle-pvc-1", DRIVER, "node-1")
        await polled(lambda: f"attach-{name}" in kcm.operations)  # the POST under way
        cluster.delete("pods", "default", "app")
        assert await cluster.wait_for(VAS, None, name) is not None  # the POST lands
        assert await cluster.wait_for(VAS, None, name, lambda obj: obj is None) is None
        await kcm.settled()
        assert cluster.objects(VAS) == []
        writes = kcm_writes(cluster)
        assert (writes[("create", VAS)], writes[("delete", VAS)]) == (1, 1)


async def test_with_a_latency_model_the_claim_worker_takes_claims_in_the_order_queued() -> None:
    """The PV controller's claim queue is client-go's workqueue: first queued, first synced.
    The stand-in sorted each batch of changes by name, so a claim named later in the
    alphabet waited behind every claim named before it that changed in the same batch."""
    model = LatencyModel(means={f"PUT {PVCS}/status": 0.1})
    async with EmulatedCluster(latency=model) as cluster, ControllerManager(cluster) as kcm:
        storage_class(cluster, "fast")
        claims = {name: claim(cluster, name, storageClassName="fast") for name in ("b", "a")}
        await until(cluster, lambda: all(GA in annotations(cluster, name) for name in claims))
        await kcm.settled()
        for name in ("b", "a"):  # one batch: no await in between
            volume(cluster, f"pvc-{name}", claim=claims[name])
        await until(cluster, lambda: all(phase("Bound")(c) for c in cluster.objects(PVCS)))
        versions = {
            name: int(cluster.get(PVCS, "default", name)["metadata"]["resourceVersion"])
            for name in claims
        }
        assert versions["b"] < versions["a"]  # b's volume came first: b was bound first
        stats = kcm.worker_stats()["claims"]
        assert stats["busy_seconds"] >= 2 * 0.1 * 0.5  # two status writes, in turn
        assert stats["max_wait_seconds"] > 0  # a waited while b was bound


async def test_with_a_latency_model_a_resync_queues_all_to_the_pv_controller_only() -> None:
    """pv_controller_base.go's `resync` queues every claim and volume in its listers to its
    claim and volume workers; the protection controllers' informers have no such period, so
    a resync gives their workers nothing (the stand-in gave them every claim and volume)."""
    model = LatencyModel(write=0.01)
    async with EmulatedCluster(latency=model) as cluster, ControllerManager(cluster) as kcm:
        storage_class(cluster, "fast")
        for n in range(3):
            created = claim(cluster, f"data-{n}", storageClassName="fast")
            await until(cluster, lambda n=n: GA in annotations(cluster, f"data-{n}"))
            volume(cluster, f"pvc-{n}", claim=created)
        await until(cluster, lambda: all(phase("Bound")(c) for c in cluster.objects(PVCS)))
        await kcm.settled()
        before = kcm.worker_stats()
        await kcm.resync()
        await kcm.settled()
        after = kcm.worker_stats()
        synced = {name: after[name]["synced"] - before[name]["synced"] for name in after}
        assert synced["claims"] == synced["volumes"] == 3
        assert synced["claim-protection"] == synced["volume-protection"] == 0


def test_a_key_queued_while_it_is_synced_goes_to_the_back_once_done() -> None:
    """client-go's workqueue: a key added while a worker processes it is only marked dirty,
    and queued when the worker calls ``Done``: behind every key queued meanwhile (the
    stand-in put it back at once, ahead of those)."""
    lane = _Lane(PVCS, None)
    a, b, c = (("default", name) for name in "abc")
    lane.put(a, False, 0.0)
    batch = lane.take(0.0)
    assert batch == [(a, False)]
    lane.put(a, False, 1.0)  # a's own write comes back while a is synced
    lane.put(b, False, 1.0)
    lane.put(a, True, 1.5)  # again, now for a resync: one entry, the mark kept
    assert list(lane.keys) == [b]
    lane.put(c, False, 2.0)
    lane.done(batch, 3.0)
    assert list(lane.keys.items()) == [(b, False), (c, False), (a, True)]
    assert lane.take(3.0) == [(b, False)]
    assert lane.stats["max_wait_seconds"] == 2.0  # b: queued at 1, taken at 3


@pytest.mark.parametrize(("code", "level"), [(404, "DEBUG"), (409, "DEBUG"), (500, "WARNING")])
def test_a_lost_race_is_told_quietly_and_synced_again(
    caplog: pytest.LogCaptureFixture, code: int, level: str
) -> None:
    """A conflict or a vanished object is a lost race, synced again on the next pass:
    hundreds a minute under churn, once warnings that buried the benchmark's own output; any
    other failed request is still a warning."""
    runner = types.SimpleNamespace(_dirty_claims={}, _dirty_volumes={})
    error = StatusError(code, "the object has been modified")
    with caplog.at_level(logging.DEBUG, logger="kopf_csi.testing.kcmrunning"):
        ControllerRunner._failed(runner, "_sync_volume_protection", PVS, ("", "pv-1"), error)  # type: ignore[arg-type]
    assert [record.levelname for record in caplog.records] == [level]
    assert runner._dirty_volumes == {("", "pv-1"): None}  # synced again on the next pass
