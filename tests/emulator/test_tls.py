"""HTTPS, as a real API server serves: `EmulatedCluster(tls=True)`.

We test these aspects: the kubeconfig it writes trusts its test certificate, so the
operator's client and kopf's (the same credentials, through `lifecycle.login`) talk HTTPS to
it, the whole operator included; a client that does not trust that certificate is refused at
the handshake; plain HTTP is not served.
"""

from __future__ import annotations

import pathlib
import ssl

import aiohttp
import pytest

from kopf_csi import kube
from kopf_csi.settings import CSISettings, KubeSettings, Settings
from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.operator import DEFAULT_MODULES, running_operator
from kopf_csi.testing.pytest_plugin import until


async def test_the_kubeconfig_trusts_the_servers_certificate(tmp_path: pathlib.Path) -> None:
    async with EmulatedCluster(tls=True) as cluster:
        assert cluster.url.startswith("https://127.0.0.1:")
        kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")
        async with await kube.KubeClient.connect(kubeconfig) as api:
            created = await api.create(
                kube.CLAIMS, {"metadata": {"name": "a", "namespace": "default"}, "spec": {}}
            )
            assert created["metadata"]["uid"]
            assert [c["metadata"]["name"] for c in await api.list(kube.CLAIMS)] == ["a"]


async def test_an_untrusting_client_and_plain_http_are_refused() -> None:
    async with EmulatedCluster(tls=True) as cluster, aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            await session.get(f"{cluster.url}/version", ssl=ssl.create_default_context())
        with pytest.raises(aiohttp.ClientError):
            async with session.get(f"http://127.0.0.1:{cluster.port}/version") as answer:
                answer.raise_for_status()


async def test_the_operator_runs_over_https(tmp_path: pathlib.Path) -> None:
    async with EmulatedCluster(tls=True) as cluster:
        kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")
        settings = Settings(
            csi=CSISettings(disabled=True), kube=KubeSettings(kubeconfig=kubeconfig)
        )
        async with running_operator(settings=settings, modules=DEFAULT_MODULES) as operator:
            cluster.create("storageclasses", {"metadata": {"name": "fast"}, "provisioner": "x"})
            cluster.create("persistentvolumes", {"metadata": {"name": "pv-1"}, "spec": {}})
            caches = operator.memo.caches
            await until(lambda: "fast" in caches.storage_classes and "pv-1" in caches.volumes)
        assert operator.error is None
