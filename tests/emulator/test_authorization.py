"""RBAC in the emulator: who a request is, what the roles allow, and how a refusal reads.

We test these aspects:
- rules match as the API server's RBAC authorizer matches them: verbs, groups, resources,
  ``*``, ``plural/subresource`` and ``*/subresource``, resourceNames, non-resource URLs;
- bindings: a ClusterRoleBinding everywhere, a RoleBinding only in its namespace (also of a
  ClusterRole), subjects by user, group and ServiceAccount, a missing role grants nothing;
- the bootstrap roles: discovery for authenticated users, /version for anyone;
- cluster-wide bindings decide first and are credited in ``uses``;
- the 403 and 401 bodies are the API server's, word for word;
- over HTTP, any client gets them (kubernetes-asyncio here); the Python-level API is not
  authorized.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest
from kubernetes_asyncio import client, config

from kopf_csi.testing.authorization import (
    ANONYMOUS,
    Authorizer,
    Request,
    User,
    forbidden,
    service_account,
)
from kopf_csi.testing.emulator import EmulatedCluster

OPERATOR = service_account("ops", "op")


def _role(kind: str, name: str, rules: list[dict[str, Any]], namespace: str | None = None) -> dict:
    meta = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {"kind": kind, "metadata": meta, "rules": rules}


def _binding(
    kind: str, name: str, role: tuple[str, str], subjects: list[dict], namespace: str | None = None
) -> dict:
    meta = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {"kind": kind, "metadata": meta, "subjects": subjects,
            "roleRef": {"kind": role[0], "name": role[1]}}  # fmt: skip


SA = {"kind": "ServiceAccount", "name": "op", "namespace": "ops"}


def _cluster_wide(*rules: dict[str, Any]) -> Authorizer:
    return Authorizer([
        _role("ClusterRole", "r", list(rules)),
        _binding("ClusterRoleBinding", "b", ("ClusterRole", "r"), [SA]),
    ])  # fmt: skip


def _allowed(
    authorizer: Authorizer, method: str, path: str, user: User = OPERATOR, **q: str
) -> bool:
    return authorizer.decide(user, Request.of(method, path, q)) is not None


PVC = "/api/v1/namespaces/apps/persistentvolumeclaims"


@pytest.mark.parametrize(
    ("rule", "method", "path", "query", "allowed"),
    [
        pytest.param({"apiGroups": [""], "resources": ["persistentvolumeclaims"],
                      "verbs": ["list"]}, "GET", PVC, {}, True, id="exact"),
        pytest.param({"apiGroups": [""], "resources": ["persistentvolumeclaims"],
                      "verbs": ["list"]}, "GET", PVC, {"watch": "true"}, False, id="other-verb"),
        pytest.param({"apiGroups": ["storage.k8s.io"], "resources": ["persistentvolumeclaims"],
                      "verbs": ["list"]}, "GET", PVC, {}, False, id="other-group"),
        pytest.param({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                     "DELETE", f"{PVC}/c", {}, True, id="wildcards"),
        pytest.param({"apiGroups": [""], "resources": ["persistentvolumeclaims"],
                      "verbs": ["patch"]}, "PATCH", f"{PVC}/c/status", {}, False,
                     id="resource-is-not-its-subresource"),
        pytest.param({"apiGroups": [""], "resources": ["persistentvolumeclaims/status"],
                      "verbs": ["patch"]}, "PATCH", f"{PVC}/c/status", {}, True,
                     id="subresource"),
        pytest.param({"apiGroups": [""], "resources": ["*/status"], "verbs": ["patch"]},
                     "PATCH", f"{PVC}/c/status", {}, True, id="any-resource-subresource"),
        pytest.param({"apiGroups": [""], "resources": ["*/status"], "verbs": ["patch"]},
                     "PATCH", f"{PVC}/c", {}, False, id="any-subresource-not-the-resource"),
        pytest.param({"apiGroups": [""], "resources": ["persistentvolumeclaims"],
                      "resourceNames": ["c"], "verbs": ["get", "list"]},
                     "GET", f"{PVC}/c", {}, True, id="resource-name"),
        pytest.param({"apiGroups": [""], "resources": ["persistentvolumeclaims"],
                      "resourceNames": ["c"], "verbs": ["get"]},
                     "GET", f"{PVC}/d", {}, False, id="other-resource-name"),
        pytest.param({"apiGroups": [""], "resources": ["persistentvolumeclaims"],
                      "resourceNames": ["c"], "verbs": ["get", "list"]},
                     "GET", PVC, {}, False, id="resource-names-never-allow-a-list"),
        pytest.param({"nonResourceURLs": ["/metrics"], "verbs": ["get"]},
                     "GET", "/metrics", {}, True, id="url"),
        pytest.param({"nonResourceURLs": ["/logs/*"], "verbs": ["get"]},
                     "GET", "/logs/a/b", {}, True, id="url-prefix"),
        pytest.param({"nonResourceURLs": ["/metrics"], "verbs": ["get"]},
                     "POST", "/metrics", {}, False, id="url-other-verb"),
    ],
)  # fmt: skip
def test_rule_matching(
    rule: dict[str, Any], method: str, path: str, query: dict[str, str], allowed: bool
) -> None:
    assert _allowed(_cluster_wide(rule), method, path, **query) is allowed


def test_a_role_binding_grants_only_in_its_namespace() -> None:
    rule = {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}
    authorizer = Authorizer([
        _role("Role", "r", [rule], namespace="ops"),
        _binding("RoleBinding", "b", ("Role", "r"), [SA], namespace="ops"),
        _role("ClusterRole", "c", [{**rule, "resources": ["secrets"]}]),
        _binding("RoleBinding", "c", ("ClusterRole", "c"), [SA], namespace="ops"),
    ])  # fmt: skip
    assert _allowed(authorizer, "GET", "/api/v1/namespaces/ops/configmaps/x")
    assert not _allowed(authorizer, "GET", "/api/v1/namespaces/apps/configmaps/x")
    assert not _allowed(authorizer, "GET", "/api/v1/configmaps")
    assert _allowed(authorizer, "GET", "/api/v1/namespaces/ops/secrets/x")
    assert not _allowed(authorizer, "GET", "/api/v1/namespaces/apps/secrets/x")


@pytest.mark.parametrize(
    ("subject", "binds"),
    [
        pytest.param({"kind": "ServiceAccount", "name": "op", "namespace": "ops"}, True, id="sa"),
        pytest.param({"kind": "ServiceAccount", "name": "op", "namespace": "x"}, False,
                     id="sa-elsewhere"),
        pytest.param({"kind": "User", "name": "system:serviceaccount:ops:op"}, True, id="user"),
        pytest.param({"kind": "Group", "name": "system:serviceaccounts:ops"}, True, id="group"),
        pytest.param({"kind": "Group", "name": "system:masters"}, False, id="other-group"),
    ],
)  # fmt: skip
def test_subjects(subject: dict[str, str], binds: bool) -> None:
    rule = {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]}
    authorizer = Authorizer([
        _role("ClusterRole", "r", [rule]),
        _binding("ClusterRoleBinding", "b", ("ClusterRole", "r"), [subject]),
    ])  # fmt: skip
    assert _allowed(authorizer, "GET", "/api/v1/nodes") is binds


def test_a_service_account_subject_defaults_to_the_binding_namespace() -> None:
    rule = {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}
    subject = {"kind": "ServiceAccount", "name": "op"}
    authorizer = Authorizer([
        _role("Role", "r", [rule], namespace="ops"),
        _binding("RoleBinding", "b", ("Role", "r"), [subject], namespace="ops"),
    ])  # fmt: skip
    assert _allowed(authorizer, "GET", "/api/v1/namespaces/ops/configmaps/x")


def test_a_binding_to_a_missing_role_grants_nothing() -> None:
    authorizer = Authorizer([_binding("ClusterRoleBinding", "b", ("ClusterRole", "gone"), [SA])])
    assert authorizer.grants[0].rules == ()
    assert not _allowed(authorizer, "GET", "/api/v1/nodes")


def test_discovery_is_for_authenticated_users_and_version_for_anyone() -> None:
    authorizer = Authorizer()
    for path in ("/api", "/api/v1", "/apis", "/apis/storage.k8s.io/v1", "/version"):
        assert _allowed(authorizer, "GET", path), path
    assert _allowed(authorizer, "GET", "/version", ANONYMOUS)
    assert not _allowed(authorizer, "GET", "/api", ANONYMOUS)
    assert not _allowed(authorizer, "GET", "/api/v1/nodes")


def test_cluster_wide_bindings_decide_first_and_are_credited() -> None:
    rule = {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}
    authorizer = Authorizer([
        _role("Role", "r", [rule], namespace="ops"),
        _binding("RoleBinding", "rb", ("Role", "r"), [SA], namespace="ops"),
        _role("ClusterRole", "c", [rule]),
        _binding("ClusterRoleBinding", "crb", ("ClusterRole", "c"), [SA]),
    ])  # fmt: skip
    token = authorizer.login(OPERATOR)
    path = "/api/v1/namespaces/ops/configmaps/x"
    assert authorizer.check("GET", path, {}, f"Bearer {token}") is None
    assert [binding for binding, _ in authorizer.uses] == ["ClusterRoleBinding/crb"]


def test_forbidden_bodies() -> None:
    crds = Request.of("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions")
    assert forbidden(OPERATOR, crds) == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": 'customresourcedefinitions.apiextensions.k8s.io is forbidden: User '
                   '"system:serviceaccount:ops:op" cannot list resource '
                   '"customresourcedefinitions" in API group "apiextensions.k8s.io" '
                   "at the cluster scope",
        "reason": "Forbidden",
        "details": {"group": "apiextensions.k8s.io", "kind": "customresourcedefinitions"},
        "code": 403,
    }  # fmt: skip
    named = forbidden(OPERATOR, Request.of("PATCH", f"{PVC}/c/status"))
    assert named["message"] == (
        'persistentvolumeclaims "c" is forbidden: User "system:serviceaccount:ops:op" cannot '
        'patch resource "persistentvolumeclaims/status" in API group "" in the namespace "apps"'
    )
    assert named["details"] == {"kind": "persistentvolumeclaims", "name": "c"}  # omitempty
    path = forbidden(ANONYMOUS, Request.of("GET", "/api"))
    assert path["message"] == 'forbidden: User "system:anonymous" cannot get path "/api"'
    assert path["details"] == {}


def test_tokens() -> None:
    authorizer = Authorizer()
    token = authorizer.login(OPERATOR)
    assert authorizer.authenticate(f"Bearer {token}") == OPERATOR
    assert authorizer.authenticate(None) == ANONYMOUS
    assert authorizer.authenticate("Bearer forged") is None
    assert authorizer.check("GET", "/api", {}, "Bearer forged") == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "Unauthorized", "reason": "Unauthorized", "code": 401,
    }  # fmt: skip


async def test_the_emulator_refuses_over_http(tmp_path: pathlib.Path) -> None:
    rule = {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}
    authorizer = _cluster_wide(rule)
    async with EmulatedCluster(authorizer=authorizer) as cluster:
        cluster.create("secrets", {"metadata": {"name": "s"}}, namespace="default")  # not checked
        kubeconfig = cluster.write_kubeconfig(
            tmp_path / "kubeconfig", token=authorizer.login(OPERATOR)
        )
        api = await config.new_client_from_config(config_file=str(kubeconfig))
        async with api:
            core = client.CoreV1Api(api)
            assert (await core.list_config_map_for_all_namespaces()).items == []
            with pytest.raises(client.ApiException) as refused:
                await core.read_namespaced_secret("s", "default")
    assert refused.value.status == 403
    assert json.loads(refused.value.body) == forbidden(
        OPERATOR, Request.of("GET", "/api/v1/namespaces/default/secrets/s")
    )
    assert authorizer.denials == [
        'secrets "s" is forbidden: User "system:serviceaccount:ops:op" cannot get resource '
        '"secrets" in API group "" in the namespace "default"'
    ]
