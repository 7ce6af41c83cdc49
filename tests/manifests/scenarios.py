"""Run the operator through its features and return every API request it made, RBAC-classified.

The operator runs exactly as in the end-to-end tests: kopf with every module in
``DEFAULT_MODULES`` (whatever the list holds when the test runs) and both example modules, the
emulated API over real HTTP, the KCM stand-in, and the reference driver over a unix socket. It
runs as the manifests' ServiceAccount, with its token, and the emulator authorizes every
request against the given RBAC objects as the API server does (403 for what they do not
allow). Claims live in their own namespace (``apps``, with a quota annotation for
``namespace_quota``), away from the operator's (``kopf-csi``), so that cluster-wide and
own-namespace permissions are told apart.

Phases, each waited for: an Immediate claim with secrets and a VolumeAttributesClass, failing
twice first (a repeated event); a WaitForFirstConsumer claim used by a pod (selected node,
attach); a clone; a snapshot (through the snapshotter and the snapshot-controller stand-in
when a snapshotter is loaded, else made on the driver) and a restore from it; an expansion and
a change of VolumeAttributesClass (acted on when a resizer is loaded); capacity and
health-monitor rounds; a group snapshot of two claims (when the group snapshotter is loaded),
created and deleted; then the pod, the snapshot and every claim deleted, down to the driver
having no volumes, and a StorageClass deleted (its capacity objects go). The test process
writes only through the emulator's Python API, so the request log holds the operator's
requests alone.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import pathlib
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from kopf_csi.csi import CSIClient
from kopf_csi.csi import messages as csi
from kopf_csi.csi.codes import Code
from kopf_csi.driver import Driver, DriverConfig, Features, running_driver
from kopf_csi.settings import (
    AttacherOptions,
    CapacitySettings,
    CSISettings,
    HealthMonitorOptions,
    KubeSettings,
    LeaderElectionSettings,
    ProvisionerOptions,
    ResizerOptions,
    Settings,
    SnapshotterOptions,
)
from kopf_csi.testing.authorization import Authorizer, service_account
from kopf_csi.testing.emulator import Body, Change, EmulatedCluster, Subscription
from kopf_csi.testing.groupsnapshots import GroupSnapshotController
from kopf_csi.testing.kcm import ControllerManager
from kopf_csi.testing.operator import DEFAULT_MODULES, running_operator
from kopf_csi.testing.requestlog import RequestLog

__all__ = ["ACCOUNT", "APPS", "DRIVER", "EXAMPLE_MODULES", "OPERATOR_NAMESPACE", "Observation",
           "observe"]  # fmt: skip

DRIVER = "hostpath.csi.kopf.dev"
NODE = "node-1"
TOPOLOGY_KEY = "topology.hostpath.csi.kopf.dev/node"
OPERATOR_NAMESPACE = "kopf-csi"
ACCOUNT = "kopf-csi"  # the Deployment's ServiceAccount: the operator runs with its token
APPS = "apps"
EXAMPLE_MODULES = (
    "kopf_csi_handlers.examples.claim_labels",
    "kopf_csi_handlers.examples.namespace_quota",
)
QUOTA = "quota.kopf-csi.kopf.dev/max-volume-size"  # namespace_quota's annotation
SNAPSHOTS = "snapshot.storage.k8s.io"
GROUPS = "groupsnapshot.storage.k8s.io"
RECORDED = (
    "volumesnapshots",
    "volumesnapshotcontents",
    "volumesnapshotclasses",
    "volumegroupsnapshots",
    "volumegroupsnapshotcontents",
    "volumegroupsnapshotclasses",
)
DEADLINE = 60.0  # per phase; a phase takes well under a second on an idle machine
RETRIES = {"retry_interval_start": 0.05, "retry_interval_max": 0.5}


async def until(what: str, predicate: Callable[[], Any], *, timeout: float = DEADLINE) -> Any:
    deadline = time.monotonic() + timeout
    while not (result := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"scenario stuck: {what} not within {timeout}s")
        await asyncio.sleep(0.05)
    return result


def _settings(kubeconfig: pathlib.Path, socket: pathlib.Path) -> Settings:
    return Settings(
        csi=CSISettings(address=f"unix://{socket}", timeout=5.0, connect_timeout=10.0),
        kube=KubeSettings(kubeconfig=kubeconfig, namespace=OPERATOR_NAMESPACE),
        # Short retries everywhere: a conflict or a busy driver costs a fraction of a second.
        provisioner=ProvisionerOptions(**RETRIES),
        attacher=AttacherOptions(**RETRIES),
        resizer=ResizerOptions(**RETRIES),
        snapshotter=SnapshotterOptions(**RETRIES),
        capacity=CapacitySettings(enabled=True, poll_interval=0.2),
        health=HealthMonitorOptions(monitor_interval=0.2, list_volumes_interval=0.2),
        # Leader election on, as in the Deployment, so that the Lease requests are seen too.
        leader_election=LeaderElectionSettings(
            enabled=True, lease_duration=2.0, renew_deadline=1.5, retry_period=0.5
        ),
    )


def _seed(cluster: EmulatedCluster) -> None:
    cluster.patch("namespaces", None, APPS, {"metadata": {"annotations": {QUOTA: "1Gi"}}})
    cluster.create("nodes", {"metadata": {"name": NODE, "labels": {TOPOLOGY_KEY: NODE}}})
    cluster.create(
        "csinodes",
        {"metadata": {"name": NODE},
         "spec": {"drivers": [{"name": DRIVER, "nodeID": NODE, "topologyKeys": [TOPOLOGY_KEY]}]}},
    )  # fmt: skip
    cluster.create("csidrivers", {"metadata": {"name": DRIVER}, "spec": {"attachRequired": True}})
    cluster.create(
        "secrets", {"metadata": {"name": "creds"}, "data": {"key": "c2VjcmV0"}}, namespace=APPS
    )
    secrets = {
        f"csi.storage.k8s.io/{op}-secret-{field}": value
        for op in ("provisioner", "controller-publish", "controller-expand")
        for field, value in (("name", "creds"), ("namespace", APPS))
    }
    for name, binding in (("immediate", "Immediate"), ("wffc", "WaitForFirstConsumer")):
        cluster.create(
            "storageclasses",
            {"metadata": {"name": name}, "provisioner": DRIVER, "reclaimPolicy": "Delete",
             "volumeBindingMode": binding, "allowVolumeExpansion": True, "parameters": secrets},
        )  # fmt: skip
    for name, iops in (("slow", "100"), ("fast", "200")):
        cluster.create(
            "volumeattributesclasses",
            {"metadata": {"name": name}, "driverName": DRIVER, "parameters": {"iops": iops}},
        )
    for group, kind, name, op in (
        (SNAPSHOTS, "VolumeSnapshotClass", "snapshots", "snapshotter"),
        (GROUPS, "VolumeGroupSnapshotClass", "groups", "group-snapshotter"),
    ):
        cluster.create(
            kind,
            {"apiVersion": f"{group}/v1", "kind": kind, "metadata": {"name": name},
             "driver": DRIVER, "deletionPolicy": "Delete",
             "parameters": {f"csi.storage.k8s.io/{op}-secret-name": "creds",
                            f"csi.storage.k8s.io/{op}-secret-namespace": APPS}},
        )  # fmt: skip


def _claim(cluster: EmulatedCluster, name: str, cls: str, **spec: Any) -> Body:
    body = {
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": cls,
                 "resources": {"requests": {"storage": "1Mi"}}, **spec},
    }  # fmt: skip
    return cluster.create("persistentvolumeclaims", body, namespace=APPS)


def _bound(cluster: EmulatedCluster, name: str) -> Body | None:
    claim = cluster.get("persistentvolumeclaims", APPS, name)
    if claim is None or (claim.get("status") or {}).get("phase") != "Bound":
        return None
    return cluster.get("persistentvolumes", None, claim["spec"]["volumeName"])


async def _snapshot(
    cluster: EmulatedCluster, client: CSIClient, source: Body, *, snapshotter: bool
) -> str:
    """A ready VolumeSnapshot `snap` of the claim `source`; returns its content's name.

    With a snapshotter loaded, the snapshot-controller stand-in makes the content and our
    snapshotter takes the snapshot. Without one, the snapshot is made on the driver directly
    and pre-provisioned: what the provisioner's restore reads is the same either way.
    """
    snapshot = cluster.create(
        "volumesnapshots",
        {"apiVersion": f"{SNAPSHOTS}/v1", "kind": "VolumeSnapshot", "metadata": {"name": "snap"},
         "spec": {"volumeSnapshotClassName": "snapshots",
                  "source": {"persistentVolumeClaimName": "source"}}},
        namespace=APPS,
    )  # fmt: skip
    if snapshotter:

        def ready() -> Body | None:
            found = cluster.get("volumesnapshots", APPS, "snap") or {}
            return found if (found.get("status") or {}).get("readyToUse") else None

        found = await until("the snapshot ready", ready)
        return str(found["status"]["boundVolumeSnapshotContentName"])
    answer = await client.create_snapshot(
        csi.CreateSnapshotRequest(
            name=f"snapshot-{snapshot['metadata']['uid']}",
            source_volume_id=source["spec"]["csi"]["volumeHandle"],
        )
    )
    assert answer.snapshot is not None
    handle, size = answer.snapshot.snapshot_id, answer.snapshot.size_bytes
    cluster.create(
        "volumesnapshotcontents",
        {"apiVersion": f"{SNAPSHOTS}/v1", "kind": "VolumeSnapshotContent",
         "metadata": {"name": "snapcontent-pre"},
         "spec": {"driver": DRIVER, "deletionPolicy": "Retain",
                  "source": {"snapshotHandle": handle},
                  "volumeSnapshotRef": {"kind": "VolumeSnapshot", "name": "snap",
                                        "namespace": APPS, "uid": snapshot["metadata"]["uid"]}}},
    )  # fmt: skip
    cluster.patch(
        "volumesnapshotcontents", None, "snapcontent-pre",
        {"status": {"snapshotHandle": handle, "readyToUse": True, "restoreSize": size}},
        subresource="status",
    )  # fmt: skip
    cluster.patch(
        "volumesnapshots", APPS, "snap",
        {"status": {"boundVolumeSnapshotContentName": "snapcontent-pre", "readyToUse": True,
                    "restoreSize": str(size)}},
        subresource="status",
    )  # fmt: skip
    return "snapcontent-pre"


async def _group_snapshot(cluster: EmulatedCluster) -> None:
    """A group snapshot of the source and the clone (labelled), ready, then deleted with its
    member snapshots (deletionPolicy Delete: on the driver, through the group)."""
    for name in ("source", "clone"):
        cluster.patch(
            "persistentvolumeclaims", APPS, name, {"metadata": {"labels": {"group": "g"}}}
        )
    cluster.create(
        "volumegroupsnapshots",
        {"apiVersion": f"{GROUPS}/v1", "kind": "VolumeGroupSnapshot", "metadata": {"name": "g"},
         "spec": {"volumeGroupSnapshotClassName": "groups",
                  "source": {"selector": {"matchLabels": {"group": "g"}}}}},
        namespace=APPS,
    )  # fmt: skip

    def ready() -> bool:
        group = cluster.get("volumegroupsnapshots", APPS, "g") or {}
        return bool((group.get("status") or {}).get("readyToUse"))

    await until("the group snapshot ready", ready)
    cluster.delete("volumegroupsnapshots", APPS, "g")
    await until(
        "the group snapshot gone", lambda: not cluster.objects("volumegroupsnapshotcontents")
    )
    await until(
        "the group's members gone", lambda: len(cluster.objects("volumesnapshotcontents")) <= 1
    )


def _loaded(modules: Sequence[str], name: str) -> bool:
    return any(module.rsplit(".", 1)[-1] == name for module in modules)


def _capacity(cluster: EmulatedCluster, resource: str, name: str, field: str) -> str | None:
    obj = cluster.get(resource, APPS if resource == "persistentvolumeclaims" else None, name)
    if field == "spec":
        return (((obj or {}).get("spec") or {}).get("capacity") or {}).get("storage")
    return (((obj or {}).get("status") or {}).get("capacity") or {}).get("storage")


async def _exercise(
    cluster: EmulatedCluster, client: CSIClient, modules: Sequence[str], driver: Driver
) -> None:
    snapshotter = _loaded(modules, "snapshotter")
    # Provisioning with secrets (Immediate), failing twice first: the repeated event is
    # aggregated. Then a pod on the node (WFFC, attach).
    driver.faults.fail("CreateVolume", Code.RESOURCE_EXHAUSTED, times=2)
    _claim(cluster, "source", "immediate", volumeAttributesClassName="slow")
    source = await until("the Immediate claim bound", lambda: _bound(cluster, "source"))
    _claim(cluster, "consumed", "wffc")
    cluster.create(
        "pods",
        {"metadata": {"name": "app"},
         "spec": {"nodeName": NODE, "containers": [{"name": "app", "image": "busybox"}],
                  "volumes": [{"name": "data",
                               "persistentVolumeClaim": {"claimName": "consumed"}}]}},
        namespace=APPS,
    )  # fmt: skip
    await until("the WFFC claim bound", lambda: _bound(cluster, "consumed"))
    await until(
        "the volume attached",
        lambda: [
            va
            for va in cluster.objects("volumeattachments")
            if (va.get("status") or {}).get("attached")
        ],
    )
    # A clone, a snapshot and a restore from it.
    clone_of = {"kind": "PersistentVolumeClaim", "name": "source"}
    _claim(cluster, "clone", "immediate", dataSource=clone_of)
    await until("the clone bound", lambda: _bound(cluster, "clone"))
    content = await _snapshot(cluster, client, source, snapshotter=snapshotter)
    restore_from = {"apiGroup": SNAPSHOTS, "kind": "VolumeSnapshot", "name": "snap"}
    _claim(cluster, "restored", "immediate", dataSource=restore_from)
    await until("the restore bound", lambda: _bound(cluster, "restored"))
    # An expansion, acted on if a resizer is loaded: the PV grows; the kubelet (absent here)
    # would finish the file system's part.
    cluster.patch(
        "persistentvolumeclaims", APPS, "source",
        {"spec": {"resources": {"requests": {"storage": "2Mi"}}}},
    )  # fmt: skip
    if _loaded(modules, "resizer"):
        volume = source["metadata"]["name"]
        await until(
            "the expansion",
            lambda: _capacity(cluster, "persistentvolumes", volume, "spec") == "2Mi",
        )
    # A change of VolumeAttributesClass, acted on if a resizer (its modify controller) is loaded.
    cluster.patch(
        "persistentvolumeclaims", APPS, "source", {"spec": {"volumeAttributesClassName": "fast"}}
    )
    if _loaded(modules, "resizer"):
        await until(
            "the modification",
            lambda: (
                (
                    (cluster.get("persistentvolumeclaims", APPS, "source") or {}).get("status")
                    or {}
                ).get("currentVolumeAttributesClassName")
                == "fast"
            ),
        )
    if _loaded(modules, "groupsnapshotter"):
        await _group_snapshot(cluster)
    # Capacity objects in the operator's namespace, and some health-monitor rounds.
    await until(
        "capacity objects",
        lambda: cluster.objects("csistoragecapacities", namespace=OPERATOR_NAMESPACE),
    )
    await asyncio.sleep(0.5)
    # Tear down: the pod (detach), the snapshot, every claim (deletion with secrets).
    cluster.delete("pods", APPS, "app")
    await until("the detach", lambda: not cluster.objects("volumeattachments"))
    cluster.delete("volumesnapshots", APPS, "snap")
    if snapshotter:  # deletionPolicy Delete: the snapshotter deletes it on the driver
        await until("the snapshot gone", lambda: not cluster.objects("volumesnapshotcontents"))
    else:
        cluster.delete("volumesnapshotcontents", None, content)
    for name in ("restored", "clone", "consumed", "source"):
        cluster.delete("persistentvolumeclaims", APPS, name)
    await until("every volume deleted", lambda: not cluster.objects("persistentvolumes"))
    await until("the driver empty", lambda: not driver.state.volumes)
    # A class going away makes its capacity objects obsolete.
    cluster.delete("storageclasses", None, "wffc")
    await until(
        "the obsolete capacity objects deleted",
        lambda: not cluster.objects("csistoragecapacities", namespace=OPERATOR_NAMESPACE),
    )


@dataclasses.dataclass
class Observation:
    """The operator's requests (start-up and shutdown included), the authorizer that judged
    them, and every version of the snapshot objects written during the run (to check them
    against the CRDs' schemas)."""

    requests: RequestLog
    authorizer: Authorizer
    objects: dict[str, list[Body]]


async def observe(
    tmp_path: pathlib.Path,
    rbac: Sequence[Body],
    modules: Sequence[str] = (*DEFAULT_MODULES, *EXAMPLE_MODULES),
) -> Observation:
    """Run the scenario with these handler modules, as the ServiceAccount under `rbac`."""
    socket = tmp_path / "csi.sock"
    config = DriverConfig(
        node_id=NODE,
        data_dir=tmp_path / "driver",
        known_nodes=None,
        features=Features(attach=True),
        durable=False,
    )
    authorizer = Authorizer(rbac)
    namespaces = ("default", "kube-system", OPERATOR_NAMESPACE, APPS)
    async with (
        EmulatedCluster(namespaces=namespaces, authorizer=authorizer) as cluster,
        ControllerManager(cluster),
        GroupSnapshotController(cluster),
        running_driver(config, socket_path=socket, grace=0.1) as driver,
        CSIClient(f"unix://{socket}", timeout=5) as client,
    ):
        _seed(cluster)
        token = authorizer.login(service_account(OPERATOR_NAMESPACE, ACCOUNT))
        settings = _settings(cluster.write_kubeconfig(tmp_path / "kubeconfig", token=token), socket)
        objects: dict[str, list[Body]] = {plural: [] for plural in RECORDED}
        with cluster.subscribe(*RECORDED) as feed:
            async with running_operator(settings=settings, modules=modules):
                await _refusing_fast(authorizer, _exercise(cluster, client, modules, driver))
            for change in await _drain(feed):
                objects[change.kind.plural].append(change.object)
        log = RequestLog()
        log.accesses.update(cluster.requests.accesses)
        log.non_resource.update(cluster.requests.non_resource)
        return Observation(log, authorizer, objects)


async def _refusing_fast(authorizer: Authorizer, scenario: Coroutine[Any, Any, None]) -> None:
    """Run the scenario, but fail at the first 403: a refused request would otherwise only
    show up as a phase stuck until its deadline."""

    refused = until("a refused request", lambda: authorizer.denials, timeout=math.inf)
    work, watcher = asyncio.ensure_future(scenario), asyncio.ensure_future(refused)
    try:
        await asyncio.wait((work, watcher), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (work, watcher):
            task.cancel()
        await asyncio.gather(work, watcher, return_exceptions=True)
    if authorizer.denials:
        raise AssertionError("the API refused requests (403):\n" + "\n".join(authorizer.denials))
    work.result()


async def _drain(feed: Subscription) -> list[Change]:
    changes: list[Change] = []
    while feed.pending:
        changes.extend(await feed.batch())
    return changes
