"""KubeClient against the emulated API over HTTP: paginated LISTs, field managers, lost races."""

from __future__ import annotations

import os
import pathlib
from collections.abc import AsyncIterator

import pytest
import yarl

from kopf_csi import kube
from kopf_csi.resizing.writes import patch_claim_status
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


# --- Who writes, and lost races -----------------------------------------------------------


async def test_each_role_writes_under_its_go_sidecars_name(
    cluster: EmulatedCluster, api: kube.KubeClient
) -> None:
    provisioner = api.as_manager("csi-provisioner")
    body = {"metadata": {"name": "cm", "namespace": "default"}, "data": {"a": "1"}}
    await provisioner.create(kube.CONFIGMAPS, body)
    await api.as_manager("csi-attacher").patch(
        kube.CONFIGMAPS, "cm", {"data": {"b": "2"}}, "default"
    )
    stored = cluster.get("configmaps", "default", "cm")
    assert stored is not None
    entries = {e["manager"]: e["fieldsV1"] for e in stored["metadata"]["managedFields"]}
    assert entries == {
        "csi-provisioner": {"f:data": {"f:a": {}}},
        "csi-attacher": {"f:data": {"f:b": {}}},
    }
    # The User-Agent names the role too (what the server uses without fieldManager).
    agent = kube.user_agent("csi-provisioner")
    assert agent.startswith("csi-provisioner/v")
    assert "OpenAPI-Generator" not in agent


async def test_lost_races_are_stale_writes_and_other_errors_are_not(
    cluster: EmulatedCluster, api: kube.KubeClient
) -> None:
    body = {"metadata": {"name": "cm", "namespace": "default"}}
    created = await api.create(kube.CONFIGMAPS, body)
    with pytest.raises(kube.ConflictError) as exists:
        await api.create(kube.CONFIGMAPS, body)
    assert not isinstance(exists.value, kube.StaleWriteError)  # 409 AlreadyExists

    cluster.patch("configmaps", "default", "cm", {"data": {"changed": "meanwhile"}})
    with pytest.raises(kube.StaleWriteError) as conflict:  # a stale PUT: 409 Conflict
        await api.replace(kube.CONFIGMAPS, created)
    assert conflict.value.status == 409
    stale_merge = {"metadata": {"resourceVersion": created["metadata"]["resourceVersion"]}}
    with pytest.raises(kube.StaleWriteError) as merged:  # a guarded merge patch: 409 Conflict
        await api.patch(kube.CONFIGMAPS, "cm", stale_merge, "default")
    assert merged.value.status == 409
    guarded = kube.guarded_patch(created, {"data": {"mine": "x"}})
    assert guarded == {"metadata": stale_merge["metadata"], "data": {"mine": "x"}}
    with pytest.raises(kube.StaleWriteError):
        await api.patch(kube.CONFIGMAPS, "cm", guarded, "default")

    # A JSON patch's failed `test` is the real server's bare 422, the same as for any patch
    # that cannot be applied: nothing tells a lost race from a bad patch, so neither is one.
    stale_test = [
        {"op": "test", "path": "/metadata/resourceVersion",
         "value": created["metadata"]["resourceVersion"]},
        {"op": "add", "path": "/data", "value": {}},
    ]  # fmt: skip
    bad = [{"op": "remove", "path": "/nothing/here"}]
    for patch in (stale_test, bad):
        with pytest.raises(kube.KubeError) as invalid:
            await api.patch(kube.CONFIGMAPS, "cm", patch, "default", patch_type="json")
        assert (invalid.value.status, invalid.value.reason) == (422, "Invalid")
        assert not isinstance(invalid.value, kube.ConflictError)
        assert str(invalid.value) == (
            "(422 Invalid) the server rejected our request due to an error in our request"
        )
    with pytest.raises(ValueError, match="resourceVersion"):
        kube.guarded_patch({"metadata": {"name": "cm"}}, {})


async def test_a_write_whose_answer_is_not_wanted_is_done_and_its_errors_still_typed(
    cluster: EmulatedCluster, api: kube.KubeClient
) -> None:
    """`answer=False` (the journal's lanes, the Events): the write happens, nothing is decoded
    for the caller, and an error answer is the same typed error as ever."""
    body = {"metadata": {"name": "cm", "namespace": "default"}, "data": {"a": "1"}}
    assert await api.create(kube.CONFIGMAPS, body, answer=False) == {}
    patch = {"data": {"b": "2"}}
    assert await api.patch(kube.CONFIGMAPS, "cm", patch, "default", answer=False) == {}
    assert cluster.get("configmaps", "default", "cm")["data"] == {"a": "1", "b": "2"}
    with pytest.raises(kube.ConflictError):  # 409 AlreadyExists
        await api.create(kube.CONFIGMAPS, body, answer=False)
    with pytest.raises(kube.NotFoundError):
        await api.patch(kube.CONFIGMAPS, "gone", {"data": {}}, "default", answer=False)
    assert api.reachability.reachable


async def test_a_claim_status_write_that_loses_a_race_is_built_again(
    cluster: EmulatedCluster, api: kube.KubeClient
) -> None:
    claim = cluster.create(
        "persistentvolumeclaims",
        {"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"]}},
        namespace="default",
    )
    cluster.patch("persistentvolumeclaims", "default", "data", {"metadata": {"labels": {"x": "y"}}})
    seen: list[str] = []

    def build(current: kube.Body) -> dict[str, object]:
        version = current["metadata"]["resourceVersion"]
        seen.append(version)
        return {"metadata": {"resourceVersion": version}, "status": {"phase": "Bound"}}

    updated = await patch_claim_status(api, claim, build)
    assert updated["status"]["phase"] == "Bound"
    assert len(seen) == 2  # the stale build, then one from the fresh read
    assert seen[0] == claim["metadata"]["resourceVersion"] != seen[1]


async def test_retry_on_conflict_gives_up_when_gone_or_after_its_attempts() -> None:
    body = {"metadata": {"name": "cm", "resourceVersion": "1"}}
    lost = kube.StaleWriteError("lost", status=409, reason="Conflict")
    tries: list[str] = []

    async def always_stale(current: kube.Body) -> None:
        tries.append(current["metadata"]["resourceVersion"])
        raise lost

    async def fresh() -> kube.Body:
        return {"metadata": {"name": "cm", "resourceVersion": str(len(tries) + 1)}}

    async def gone() -> None:
        return None

    with pytest.raises(kube.StaleWriteError):
        await kube.retry_on_conflict(always_stale, body, read=fresh)
    assert tries == ["1", "2", "3", "4", "5"]  # each attempt decides from a fresh read
    with pytest.raises(kube.NotFoundError):
        await kube.retry_on_conflict(always_stale, body, read=gone)


def test_kubeconfig_files_are_the_listed_files_that_exist(tmp_path: pathlib.Path) -> None:
    """A `KUBECONFIG`-style list: the OS's path separator, empty entries skipped, `~` expanded."""
    real = tmp_path / "config"
    real.write_text("apiVersion: v1\n")
    listed = os.pathsep.join(["", str(tmp_path / "missing"), str(real), str(tmp_path)])
    assert kube.kubeconfig_files(listed) == [real]
    assert kube.kubeconfig_files(str(tmp_path / "missing")) == []


async def test_a_name_no_object_can_have_is_sent_as_that_name(
    cluster: EmulatedCluster, api: kube.KubeClient
) -> None:
    """A name with a space, `?`, `#` or `%` (a module's typo, a bad template) is quoted into
    the path, so that the server reads that name and answers a clear 404 naming it, instead of
    a query or a fragment cut off the path."""
    cluster.create("configmaps", {"metadata": {"name": "a"}}, namespace="default")
    for name in ("a b", "a?b=c", "a#b", "a%41", "ä"):
        with pytest.raises(kube.NotFoundError) as missing:
            await api.read(kube.CONFIGMAPS, name, "default")
        assert f'"{name}" not found' in str(missing.value)
    built = kube._url("https://h:6443", "/api/v1/namespaces/d/configmaps/a b?c#d%", "")
    assert built.raw_path == "/api/v1/namespaces/d/configmaps/a%20b%3Fc%23d%25"
    assert (built.path, built.raw_query_string, built.fragment) == (
        "/api/v1/namespaces/d/configmaps/a b?c#d%",
        "",
        "",
    )


@pytest.mark.parametrize(
    "host",
    [
        "https://127.0.0.1:6443",
        "https://[::1]:6443",
        "https://kubernetes.default.svc/",
        "https://rancher.example.com/k8s/clusters/c-m-1",  # an API behind a proxy's path
        "http://localhost:8001",
    ],
)
@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/persistentvolumes/pvc-6f1c2a8e-0a7b-4f5e-9c57-3e1d2f4a5b6c",
        "/apis/rbac.authorization.k8s.io/v1/clusterroles/system:csi-external-provisioner",
        "/api/v1/namespaces/default/events",
    ],
)
@pytest.mark.parametrize(
    "params",
    [
        (),
        (("fieldManager", "csi-provisioner"),),
        (("labelSelector", "app in (a,b),tier!=x"), ("limit", "500"), ("continue", "eyJ2Ijo+/=")),
    ],
)
def test_a_requests_url_built_from_its_parts_is_the_one_parsed(
    host: str, path: str, params: tuple[tuple[str, str], ...]
) -> None:
    """The same server, path and query values as parsing the text gives, and the pool's request
    target is the URL's path and query. (The text itself may
    differ: parsing unquoted some of the query's safe characters, `(`, `,`, `/`, which the
    server decodes the same.)"""
    query = kube._query(params) if params else ""
    built = kube._url(host, path, query)
    parsed = yarl.URL(host.rstrip("/") + path + (f"?{query}" if query else ""))
    assert built.origin() == parsed.origin()
    assert (built.raw_path, built.path) == (parsed.raw_path, parsed.path)
    assert list(built.query.items()) == list(parsed.query.items()) == list(params)
    assert built.raw_query_string == query
    # The pool's request target (`httppool`): the same path and query, as sent on the wire.
    assert kube._target(host, path, query) == built.raw_path_qs
