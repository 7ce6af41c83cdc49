"""Lists over real HTTP: a proper List with a resourceVersion, across namespaces, selectors."""

from __future__ import annotations

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from kopf_csi.testing.emulator import EmulatedCluster


@pytest.fixture
def pods(cluster: EmulatedCluster) -> None:
    for namespace, name, labels, node in [
        ("ns1", "a", {"app": "db", "tier": "x"}, "node1"),
        ("ns1", "b", {"app": "web"}, "node2"),
        ("ns2", "c", {"app": "db"}, None),
        ("ns2", "d", {}, "node1"),
    ]:
        spec: dict[str, object] = {"containers": [{"name": "main", "image": "busybox"}]}
        if node:
            spec["nodeName"] = node
        cluster.create(
            "pods",
            {"metadata": {"name": name, "labels": labels}, "spec": spec},
            namespace=namespace,
        )


async def names(core: client.CoreV1Api, **selectors: str) -> list[str]:
    listed = await core.list_pod_for_all_namespaces(**selectors)
    return [pod.metadata.name for pod in listed.items]


@pytest.mark.usefixtures("pods")
async def test_list_is_a_list_with_a_resource_version(
    cluster: EmulatedCluster, core: client.CoreV1Api
) -> None:
    listed = await core.list_pod_for_all_namespaces()
    assert listed.kind == "PodList"
    assert listed.metadata.resource_version == str(cluster.resource_version)
    assert [(pod.metadata.namespace, pod.metadata.name) for pod in listed.items] == [
        ("ns1", "a"), ("ns1", "b"), ("ns2", "c"), ("ns2", "d"),
    ]  # fmt: skip
    in_ns2 = await core.list_namespaced_pod("ns2")
    assert [pod.metadata.name for pod in in_ns2.items] == ["c", "d"]


@pytest.mark.usefixtures("pods")
@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        pytest.param("app=db", ["a", "c"], id="equality"),
        pytest.param("app==db,tier=x", ["a"], id="double-equals-and-conjunction"),
        pytest.param("app!=db", ["b", "d"], id="inequality-includes-unlabelled"),
        pytest.param("app in (web, db),tier", ["a"], id="set-in-and-exists"),
        pytest.param("app notin (db)", ["b", "d"], id="set-notin"),
        pytest.param("!app", ["d"], id="does-not-exist"),
    ],
)
async def test_label_selectors(core: client.CoreV1Api, selector: str, expected: list[str]) -> None:
    assert await names(core, label_selector=selector) == expected


@pytest.mark.usefixtures("pods")
@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        pytest.param("metadata.name=b", ["b"], id="name"),
        pytest.param("metadata.namespace==ns2", ["c", "d"], id="namespace"),
        pytest.param("metadata.namespace!=ns2,metadata.name!=a", ["b"], id="inequalities"),
        pytest.param("spec.nodeName=node1", ["a", "d"], id="pod-node-name"),
        pytest.param("spec.nodeName=", ["c"], id="unscheduled-pods"),
    ],
)
async def test_field_selectors(core: client.CoreV1Api, selector: str, expected: list[str]) -> None:
    assert await names(core, field_selector=selector) == expected


async def test_a_bad_selector_is_400(core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as error:
        await core.list_pod_for_all_namespaces(label_selector="app in db")
    assert error.value.status == 400


async def test_cluster_scoped_kinds_have_no_namespace(
    cluster: EmulatedCluster, api: client.ApiClient
) -> None:
    storage = client.StorageV1Api(api)
    await storage.create_storage_class(
        {"metadata": {"name": "fast"}, "provisioner": "csi.example.com"}
    )
    listed = await storage.list_storage_class()
    assert [(sc.metadata.name, sc.metadata.namespace) for sc in listed.items] == [("fast", None)]
    assert cluster.get("storageclasses", None, "fast") is not None


async def test_pages_with_limit_and_continue_show_one_snapshot(
    cluster: EmulatedCluster, core: client.CoreV1Api
) -> None:
    for index in range(7):
        cluster.create("configmaps", {"metadata": {"name": f"cm-{index}"}}, namespace="ns1")
    first = await core.list_namespaced_config_map("ns1", limit=3)
    assert [item.metadata.name for item in first.items] == ["cm-0", "cm-1", "cm-2"]
    assert first.metadata.remaining_item_count == 4
    cluster.create("configmaps", {"metadata": {"name": "cm-9"}}, namespace="ns1")  # not in it
    cluster.delete("configmaps", "ns1", "cm-5")  # still in it: the snapshot is the first page's
    second = await core.list_namespaced_config_map(
        "ns1", limit=3, _continue=first.metadata._continue
    )
    third = await core.list_namespaced_config_map(
        "ns1", limit=3, _continue=second.metadata._continue
    )
    assert [item.metadata.name for item in second.items] == ["cm-3", "cm-4", "cm-5"]
    assert [item.metadata.name for item in third.items] == ["cm-6"]
    assert not third.metadata._continue
    assert second.metadata.resource_version == first.metadata.resource_version


async def test_a_limit_above_the_count_gives_everything_and_no_token(
    cluster: EmulatedCluster, core: client.CoreV1Api
) -> None:
    cluster.create("configmaps", {"metadata": {"name": "only"}}, namespace="ns1")
    listed = await core.list_namespaced_config_map("ns1", limit=500)
    assert [item.metadata.name for item in listed.items] == ["only"]
    assert not listed.metadata._continue


async def test_an_unknown_continue_token_is_gone(core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as info:
        await core.list_namespaced_config_map("ns1", limit=3, _continue="nosuch:3")
    assert info.value.status == 410
    assert "too old to display a consistent list result" in info.value.body
