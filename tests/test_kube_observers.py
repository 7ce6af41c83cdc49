"""What the API client tells its observers (`KubeClient.observe`; the operator's metrics).

We test these aspects, against the emulated API over HTTP:
- every request: the role that sent it (copies made with `as_manager` share the observers),
  its HTTP method, the resource and subresource, and its status code, an error's included;
- a request that got no answer at all (nothing listening) is `<error>`, client-go's word;
- new connections are told, and so are requests that waited for a free connection once the
  pool's limit (100) was reached;
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
        self.waits: list[float] = []
        self.connections: list[float] = []

    def requested(self, manager: str, verb: str, resource: str, code: str, seconds: float) -> None:
        self.requests.append((manager, verb, resource, code))
        self.seconds.append(seconds)

    def connection_waited(self, seconds: float) -> None:
        self.waits.append(seconds)

    def connected(self, seconds: float) -> None:
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
    assert len(recorder.connections) >= 1  # the first request opened one
    assert not recorder.waits  # one request at a time: the pool never ran out


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
        with pytest.raises(kube.TRANSPORT_ERRORS):
            await api.get(kube.VOLUMES, "pv-1")
    assert recorder.requests == [("kopf-csi", "GET", "persistentvolumes", "<error>")]
    assert not recorder.connections  # none was opened


async def test_requests_beyond_the_pool_wait_for_a_connection(
    cluster: EmulatedCluster, kubeconfig: pathlib.Path
) -> None:
    recorder = Recorder()
    async with await kube.KubeClient.connect(kubeconfig) as api:
        api.observe(recorder)
        # All sent in one turn of the loop, before any answer frees a connection: the first
        # 100 (kubernetes-asyncio's pool limit) open one each, the other 30 wait for one.
        await asyncio.gather(*(api.get(kube.VOLUMES, f"pv-{i}") for i in range(130)))
    assert len(recorder.requests) == 130
    assert 1 <= len(recorder.connections) <= 100
    assert len(recorder.waits) >= 1
    assert all(seconds >= 0 for seconds in recorder.waits)


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
