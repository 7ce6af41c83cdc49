"""What the API client tells its observers (`KubeClient.observe`; the operator's metrics).

We test these aspects, against the emulated API over HTTP:
- every request: the role that sent it (copies made with `as_manager` share the observers),
  its HTTP method, the resource and subresource, and its status code, an error's included;
- a request that got no answer at all (nothing listening) is `<error>`, client-go's word;
- each request's time to get a connection is told: at once when one is free, after a wait
  once the pool's limit (100) was reached;
- the resource named by any path the client sends.
"""

from __future__ import annotations

import asyncio
import json
import pathlib
import socket

import pytest

from kopf_csi import kube
from kopf_csi.testing.emulator import EmulatedCluster


class Recorder:
    def __init__(self) -> None:
        self.requests: list[tuple[str, str, str, str]] = []
        self.seconds: list[float] = []
        self.connections: list[float] = []

    def requested(self, manager: str, verb: str, resource: str, code: str, seconds: float) -> None:
        self.requests.append((manager, verb, resource, code))
        self.seconds.append(seconds)

    def connection_got(self, seconds: float) -> None:
        self.connections.append(seconds)


def _volume(name: str) -> kube.Body:
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name}}


async def test_each_request_is_told_with_its_role_resource_and_code(
    cluster: EmulatedCluster, kubeconfig: pathlib.Path
) -> None:
    recorder = Recorder()
    async with await kube.KubeClient.connect(kubeconfig) as api:
        api.observe(recorder)
        provisioner = api.as_manager("csi-provisioner")  # made after: shares the observers
        await provisioner.create(kube.VOLUMES, _volume("pv-1"))
        assert await api.get(kube.VOLUMES, "missing") is None
        cluster.faults.add(500, verb="patch", resource="persistentvolumes", subresource="status")
        with pytest.raises(kube.KubeError):
            await provisioner.patch(kube.VOLUMES, "pv-1", {"status": {"phase": "Bound"}},
                                    subresource="status")  # fmt: skip
    assert recorder.requests == [
        ("csi-provisioner", "POST", "persistentvolumes", "201"),
        ("kopf-csi", "GET", "persistentvolumes", "404"),
        ("csi-provisioner", "PATCH", "persistentvolumes/status", "500"),
    ]
    assert all(seconds >= 0 for seconds in recorder.seconds)
    assert len(recorder.connections) == 3  # each request got one


async def test_every_kind_of_request_names_its_resource_as_its_path_does(
    cluster: EmulatedCluster, kubeconfig: pathlib.Path
) -> None:
    """The callers that know the resource tell it (no parse of each path): the same names as
    `resource_of` gives for the paths they send, namespaced and with a subresource."""
    recorder = Recorder()
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "ns"}}
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
             "metadata": {"name": "data", "namespace": "ns"}, "spec": {}}  # fmt: skip
    async with await kube.KubeClient.connect(kubeconfig) as api:
        api.observe(recorder)
        created = await api.create(kube.CONFIGMAPS, cm)
        await api.read(kube.CONFIGMAPS, "cm", "ns")
        await api.get_metadata(kube.CONFIGMAPS, "cm", "ns")
        await api.list(kube.CONFIGMAPS, "ns")
        await api.replace(kube.CONFIGMAPS, created)
        await api.patch(kube.CONFIGMAPS, "cm", {"data": {"a": "b"}}, "ns", answer=False)
        await api.delete(kube.CONFIGMAPS, "cm", "ns")
        await api.create(kube.CLAIMS, claim)
        await api.patch(kube.CLAIMS, "data", {"status": {"phase": "Bound"}}, "ns",
                        subresource="status")  # fmt: skip
        await api.version()
    paths = [
        "/api/v1/namespaces/ns/configmaps",
        *["/api/v1/namespaces/ns/configmaps/cm"] * 2,
        "/api/v1/namespaces/ns/configmaps",
        *["/api/v1/namespaces/ns/configmaps/cm"] * 3,
        "/api/v1/namespaces/ns/persistentvolumeclaims",
        "/api/v1/namespaces/ns/persistentvolumeclaims/data/status",
        "/version",
    ]
    told = [resource for _, _, resource, _ in recorder.requests]
    assert told == [kube.resource_of(path) for path in paths]
    assert told[-2:] == ["persistentvolumeclaims/status", "version"]


async def test_a_request_with_no_answer_is_an_error(tmp_path: pathlib.Path) -> None:
    with socket.socket() as unused:  # a port nobody listens on once this closes
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "u", "user": {}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c",
    }
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps(config))
    recorder = Recorder()
    async with await kube.KubeClient.connect(kubeconfig) as api:
        api.observe(recorder)
        with pytest.raises(kube.UnavailableError):
            await api.get(kube.VOLUMES, "pv-1")
    assert recorder.requests == [("kopf-csi", "GET", "persistentvolumes", "<error>")]
    assert not recorder.connections  # none could be had


async def test_requests_beyond_the_pool_are_told_too(
    cluster: EmulatedCluster, kubeconfig: pathlib.Path
) -> None:
    recorder = Recorder()
    async with await kube.KubeClient.connect(kubeconfig) as api:
        api.observe(recorder)
        # All sent in one turn of the loop, before any answer frees a connection: the first
        # 100 (kubernetes-asyncio's pool limit) open one each, the other 30 wait for one.
        await asyncio.gather(*(api.get(kube.VOLUMES, f"pv-{i}") for i in range(130)))
    # Every request told how long it took to get its connection, the 30 beyond the pool's
    # limit (which waited for others' answers) included.
    assert len(recorder.requests) == len(recorder.connections) == 130
    assert all(seconds >= 0 for seconds in recorder.connections)


@pytest.mark.parametrize(
    ("path", "resource"),
    [
        ("/api/v1/persistentvolumes", "persistentvolumes"),
        ("/api/v1/persistentvolumes/pvc-1", "persistentvolumes"),
        ("/api/v1/persistentvolumes/pvc-1/status", "persistentvolumes/status"),
        ("/api/v1/namespaces/ns/persistentvolumeclaims/data/status",
         "persistentvolumeclaims/status"),
        ("/api/v1/namespaces/ns/persistentvolumeclaims?limit=500", "persistentvolumeclaims"),
        ("/api/v1/namespaces/ns/events", "events"),
        ("/api/v1/namespaces/ns", "namespaces"),
        ("/api/v1/namespaces", "namespaces"),
        ("/apis/storage.k8s.io/v1/volumeattachments/csi-1", "volumeattachments"),
        ("/apis/coordination.k8s.io/v1/namespaces/ns/leases/l", "leases"),
        ("/apis/snapshot.storage.k8s.io/v1/volumesnapshotcontents/c/status",
         "volumesnapshotcontents/status"),
        ("/version", "version"),
        ("/apis", "discovery"),
    ],
)  # fmt: skip
def test_the_resource_of_a_path(path: str, resource: str) -> None:
    assert kube.resource_of(path) == resource
