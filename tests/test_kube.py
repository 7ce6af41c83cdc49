"""KubeClient against the emulated API over HTTP: paginated LISTs."""

from __future__ import annotations

import pathlib
from collections.abc import AsyncIterator

import pytest

from kopf_csi import kube
from kopf_csi.testing.emulator import EmulatedCluster


@pytest.fixture
async def api(kubeconfig: pathlib.Path) -> AsyncIterator[kube.KubeClient]:
    client = await kube.KubeClient.connect(kubeconfig)
    yield client
    await client.close()


def seed(cluster: EmulatedCluster, count: int) -> None:
    for index in range(count):
        cluster.create("configmaps", {"metadata": {"name": f"cm-{index:02}"}}, namespace="default")


def names(page: list[kube.Body]) -> list[str]:
    return [obj["metadata"]["name"] for obj in page]


async def test_pages_come_one_limit_at_a_time(
    cluster: EmulatedCluster, api: kube.KubeClient
) -> None:
    seed(cluster, 7)
    pages = [names(page) async for page in api.pages(kube.CONFIGMAPS, "default", limit=3)]
    assert pages == [["cm-00", "cm-01", "cm-02"], ["cm-03", "cm-04", "cm-05"], ["cm-06"]]
    assert names(await api.list(kube.CONFIGMAPS, "default")) == [f"cm-{i:02}" for i in range(7)]


async def test_an_expired_continue_token_restarts_the_list_once(
    cluster: EmulatedCluster, api: kube.KubeClient
) -> None:
    seed(cluster, 5)
    pages = api.pages(kube.CONFIGMAPS, "default", limit=2)
    assert names(await anext(pages)) == ["cm-00", "cm-01"]
    cluster.faults.add(410, verb="list", resource="configmaps", message="too old")
    rest = [names(page) async for page in pages]
    assert rest == [["cm-00", "cm-01"], ["cm-02", "cm-03"], ["cm-04"]]


async def test_a_second_expiry_is_an_error(cluster: EmulatedCluster, api: kube.KubeClient) -> None:
    seed(cluster, 5)
    pages = api.pages(kube.CONFIGMAPS, "default", limit=2)
    await anext(pages)
    cluster.faults.add(410, verb="list", resource="configmaps", message="too old")
    await anext(pages)  # restarted from the beginning
    cluster.faults.add(410, verb="list", resource="configmaps", message="too old again")
    with pytest.raises(kube.KubeError) as info:
        await anext(pages)
    assert info.value.status == 410


async def test_the_first_page_failing_is_an_error(
    cluster: EmulatedCluster, api: kube.KubeClient
) -> None:
    cluster.faults.add(410, verb="list", resource="configmaps", message="gone")
    with pytest.raises(kube.KubeError):
        await api.list(kube.CONFIGMAPS, "default")
