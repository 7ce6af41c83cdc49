"""Fixtures and helpers for the provisioner's end-to-end tests.

Everything runs for real: kopf with the default handler modules in its own thread, the
emulated API over HTTP, the KCM stand-in, and the reference driver over its unix socket. Here:

- the settings: short retry intervals and a short CSI timeout, so that retries and hangs fit
  into a test's second or two (the Go defaults are 1 s .. 5 min and 10 s);
- the nodes: Node and CSINode objects for two nodes, as kubelet and the node-driver-registrar
  register them, so that topology has keys and segments to work with;
- a spy on the driver: every CreateVolume request it handled (the spies on every call it
  received and on the secrets each call carried, `calls` and `secrets_seen`, come from
  `kopf_csi.testing.spies`, registered in tests/conftest.py);
- helpers to create StorageClasses, claims and pods, and to wait for phases and events.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from typing import Any

import pytest

from kopf_csi.driver import volumes as driver_volumes
from kopf_csi.driver.volumes import VolumeRequest
from kopf_csi.settings import CSISettings, ProvisionerOptions, Settings
from kopf_csi.testing.emulator import Body, Change, EmulatedCluster, Subscription
from kopf_csi.testing.operator import OperatorThread

from ..conftest import DRIVER_NAME, NODE

TOPOLOGY_KEY = "topology.hostpath.csi.kopf.dev/node"
NODE_2 = "node-2"
NAMESPACE = "default"
CSI_TIMEOUT = 1.0
RETRY_START = 0.05
RETRY_MAX = 0.5


@pytest.fixture
def provisioner_options() -> ProvisionerOptions:
    return ProvisionerOptions(retry_interval_start=RETRY_START, retry_interval_max=RETRY_MAX)


@pytest.fixture
def settings(settings: Settings, provisioner_options: ProvisionerOptions) -> Settings:
    csi = CSISettings(address=settings.csi.address, timeout=CSI_TIMEOUT, connect_timeout=10.0)
    return dataclasses.replace(settings, csi=csi, provisioner=provisioner_options)


@pytest.fixture
async def operator(
    operator: OperatorThread, cluster: EmulatedCluster
) -> AsyncIterator[OperatorThread]:
    """The shared operator, stopped only once the cluster has gone quiet.

    kopf 1.45 leaves a watch's pause-waiter task behind when it stops in the middle of a busy
    stream, then waits 5 s for that "hung" task; letting the last changes drain first keeps
    each test's teardown short.
    """
    yield operator
    await settled(cluster)


async def settled(cluster: EmulatedCluster, *, quiet: float = 0.06, timeout: float = 2.0) -> None:
    """Wait until nothing has changed in the cluster for `quiet` seconds (or `timeout` passed)."""
    deadline = time.monotonic() + timeout
    version, since = cluster.resource_version, time.monotonic()
    while time.monotonic() < deadline:
        await asyncio.sleep(0.02)
        if cluster.resource_version != version:
            version, since = cluster.resource_version, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return


def node_objects(name: str) -> tuple[Body, Body]:
    """What kubelet and node-driver-registrar would have registered for one node."""
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, TOPOLOGY_KEY: name}},
    }
    csinode = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSINode",
        "metadata": {"name": name},
        "spec": {
            "drivers": [{"name": DRIVER_NAME, "nodeID": name, "topologyKeys": [TOPOLOGY_KEY]}]
        },
    }
    return node, csinode


@pytest.fixture(autouse=True)
def nodes(cluster: EmulatedCluster) -> tuple[str, ...]:
    """Two registered nodes, before the operator starts (its caches are primed with them)."""
    for name in (NODE, NODE_2):
        node, csinode = node_objects(name)
        cluster.create("nodes", node)
        cluster.create("csinodes", csinode)
    return NODE, NODE_2


# --- Spies on the driver -----------------------------------------------------------------------


@pytest.fixture
def created(monkeypatch: pytest.MonkeyPatch) -> list[VolumeRequest]:
    """Every CreateVolume request the driver handled (after faults, secrets and field checks)."""
    seen: list[VolumeRequest] = []
    original = driver_volumes.create_volume

    async def spy(backend: Any, request: VolumeRequest) -> Any:
        seen.append(request)
        return await original(backend, request)

    monkeypatch.setattr(driver_volumes, "create_volume", spy)
    return seen


# --- Objects -----------------------------------------------------------------------------------


async def make_storage_class(
    cluster: EmulatedCluster,
    operator: OperatorThread | None = None,
    name: str = "sc",
    *,
    binding: str = "Immediate",
    reclaim: str = "Delete",
    parameters: Mapping[str, str] | None = None,
    mount_options: Sequence[str] | None = None,
    allowed_topologies: Sequence[Mapping[str, Sequence[str]]] | None = None,
    provisioner: str = DRIVER_NAME,
) -> Body:
    """Create a StorageClass; with `operator`, wait until its cache has it.

    Claims and classes come through separate watches, so a claim created right after its class
    may reach the operator first (then it is retried, as with the Go informers). Waiting keeps
    the event sequences in these tests deterministic.
    """
    body: dict[str, Any] = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": provisioner,
        "reclaimPolicy": reclaim,
        "volumeBindingMode": binding,
    }
    if parameters is not None:
        body["parameters"] = dict(parameters)
    if mount_options is not None:
        body["mountOptions"] = list(mount_options)
    if allowed_topologies is not None:
        body["allowedTopologies"] = [
            {
                "matchLabelExpressions": [
                    {"key": key, "values": list(values)} for key, values in term.items()
                ]
            }
            for term in allowed_topologies
        ]
    created = cluster.create("storageclasses", body)
    if operator is not None:
        uid = created["metadata"]["uid"]

        def cached() -> bool:
            found = operator.memo.caches.storage_classes.get(name)
            return found is not None and found["metadata"]["uid"] == uid

        await wait_until(cached, what=f"StorageClass {name} in the operator's cache")
    return created


def make_claim(
    cluster: EmulatedCluster,
    name: str = "data",
    *,
    storage_class: str = "sc",
    size: str = "1Mi",
    access_modes: Iterable[str] = ("ReadWriteOnce",),
    volume_mode: str | None = None,
    data_source: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    namespace: str = NAMESPACE,
    extra_spec: Mapping[str, Any] | None = None,
) -> Body:
    spec: dict[str, Any] = {
        "accessModes": list(access_modes),
        "resources": {"requests": {"storage": size}},
        "storageClassName": storage_class,
    }
    if volume_mode is not None:
        spec["volumeMode"] = volume_mode
    if data_source is not None:
        spec["dataSource"] = dict(data_source)
    spec.update(extra_spec or {})
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if annotations:
        metadata["annotations"] = dict(annotations)
    body = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": metadata, "spec": spec}
    return cluster.create("persistentvolumeclaims", body)


def make_pod(
    cluster: EmulatedCluster,
    name: str,
    claim: str,
    *,
    node: str = NODE,
    namespace: str = NAMESPACE,
) -> Body:
    """A pod scheduled to `node` using `claim`: the KCM stand-in selects the node for WFFC
    claims and attaches the bound volume (a VolumeAttachment)."""
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "app", "image": "busybox"}],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
        },
    }
    return cluster.create("pods", body)


def volume_name(claim: Body) -> str:
    return f"pvc-{claim['metadata']['uid']}"


# --- Waiting -----------------------------------------------------------------------------------


async def wait_until(
    check: Callable[[], Any], *, timeout: float = 5.0, interval: float = 0.02, what: str = ""
) -> Any:
    """Poll `check()` until it returns something truthy; return that."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise TimeoutError(f"not within {timeout}s: {what or check}")
        await asyncio.sleep(interval)


async def wait_for_phase(
    cluster: EmulatedCluster,
    resource: str,
    name: str,
    phase: str,
    *,
    namespace: str | None = NAMESPACE,
    timeout: float = 5.0,
) -> Body:
    if resource in ("persistentvolumes", "pv"):
        resource, namespace = "persistentvolumes", None

    def reached(obj: Body | None) -> bool:
        return obj is not None and (obj.get("status") or {}).get("phase") == phase

    found = await cluster.wait_for(resource, namespace, name, reached, timeout=timeout)
    assert found is not None
    return found


async def wait_for_bound(cluster: EmulatedCluster, claim: Body, *, timeout: float = 5.0) -> Body:
    """Wait until the claim is Bound; return its PV."""
    name, namespace = claim["metadata"]["name"], claim["metadata"]["namespace"]
    bound = await wait_for_phase(
        cluster, "persistentvolumeclaims", name, "Bound", namespace=namespace, timeout=timeout
    )
    volume = cluster.get("persistentvolumes", None, bound["spec"]["volumeName"])
    assert volume is not None
    return volume


async def wait_for_gone(
    cluster: EmulatedCluster,
    resource: str,
    name: str,
    *,
    namespace: str | None = None,
    timeout: float = 5.0,
) -> None:
    await cluster.wait_for(resource, namespace, name, lambda obj: obj is None, timeout=timeout)


async def wait_for_change(
    feed: Subscription, predicate: Callable[[Body], bool], *, timeout: float = 5.0
) -> Body:
    """Take changes from a subscription until one's object matches; return that object."""
    async with asyncio.timeout(timeout):
        async for change in feed:
            if predicate(change.object):
                return change.object
    raise AssertionError("the subscription was closed")


async def changes_until_deleted(feed: Subscription, *, timeout: float = 5.0) -> list[Change]:
    """Take changes from a subscription up to and including the first DELETED one."""
    changes: list[Change] = []
    async with asyncio.timeout(timeout):
        async for change in feed:
            changes.append(change)
            if change.type == "DELETED":
                return changes
    raise AssertionError(f"the subscription was closed; changes: {changes}")


async def drain(feed: Subscription) -> list[Change]:
    """Every change queued in a subscription now."""
    changes: list[Change] = []
    while feed.pending:
        changes.extend(await feed.batch())
    return changes


async def assert_stays(check: Callable[[], Any], *, duration: float, what: str = "") -> None:
    """Assert that `check()` holds throughout a window (for "nothing happens" outcomes)."""
    deadline = time.monotonic() + duration
    while time.monotonic() < deadline:
        assert check(), what or check
        await asyncio.sleep(0.02)
    assert check(), what or check


def events_for(cluster: EmulatedCluster, obj: Body, reason: str | None = None) -> list[Body]:
    """The core events about this object (by uid), oldest first, optionally of one reason."""
    uid = obj["metadata"]["uid"]
    found = [
        event
        for event in cluster.objects("events")
        if event["involvedObject"].get("uid") == uid
        and (reason is None or event.get("reason") == reason)
    ]
    return sorted(found, key=lambda e: int(e["metadata"]["resourceVersion"]))


async def wait_for_event(
    cluster: EmulatedCluster,
    obj: Body,
    reason: str,
    *,
    message: str | Callable[[str], bool] | None = None,
    timeout: float = 5.0,
) -> Body:
    """Wait for an event of this reason (and message, exact or by predicate) about `obj`."""

    def matching() -> Body | None:
        for event in events_for(cluster, obj, reason):
            text = event.get("message", "")
            if message is None or (message(text) if callable(message) else text == message):
                return event
        return None

    try:
        event: Body = await wait_until(matching, timeout=timeout)
    except TimeoutError:
        seen = [(e["reason"], e["message"]) for e in events_for(cluster, obj)]
        raise TimeoutError(f"no {reason} event matching {message!r}; events: {seen}") from None
    return event
