"""The RBAC in manifests/ against what the operator really asks the API for.

The operator runs once for this directory (`scenarios.observe`: every module of
DEFAULT_MODULES and both example modules, the emulated API over HTTP, the reference driver) as
the manifests' ServiceAccount, and the emulator authorizes each request against the rendered
RBAC (`rendering.rbac()`: the base and `manifests/modules/*`) as the API server does. Then:

- no request was refused (the authorizer keeps every 403 it answered, whether or not the
  operator shrugged it off);
- every binding of the ServiceAccount refers to a role that exists;
- every permission the RBAC grants decided some request, or is in ALLOWED_UNOBSERVED with its
  reason; cluster-wide permissions must have been used outside the operator's namespace (else
  they belong in the Role);
- ALLOWED_UNOBSERVED holds nothing stale: each entry is granted and was not observed;
- no rule grants a wildcard, `escalate`, `bind` or `impersonate`;
- the request log held no non-resource request but API discovery (which every authenticated
  user may do).
"""

from __future__ import annotations

import pytest

from kopf_csi.testing.authorization import Grant, service_account
from kopf_csi.testing.requestlog import Access, RequestLog

from .rendering import MANIFESTS, find, rbac, render
from .scenarios import ACCOUNT, OPERATOR_NAMESPACE, Observation

# Permissions granted although the scenario cannot observe them: (group, resource, verb),
# each with the reason. Keep it short; prefer making the scenario reach the path.
ALLOWED_UNOBSERVED: dict[tuple[str, str, str], str] = {
    ("snapshot.storage.k8s.io", "volumesnapshots", "list"): (
        "the provisioner's orphaned snapshot-source sweep lists every VolumeSnapshot, every "
        "SNAPSHOT_SWEEP_INTERVAL (5 min, fixed in handlers/provisioner.py); the run lasts "
        "seconds. Without it the sweep fails quietly and protection finalizers can linger."
    ),
    ("", "pods", "list"): (
        "the resizer lists a claim's pods after an offline driver's FailedPrecondition (volume "
        "in use?); the scenario's driver expands online. tests/resizer/test_offline.py does, "
        "under this RBAC (the kit's kit_rbac, on by default), and fails with the 403 without it."
    ),
}


@pytest.fixture(scope="module")
def granted(observation: Observation) -> list[Grant]:
    user = service_account(OPERATOR_NAMESPACE, ACCOUNT)
    return [grant for grant in observation.authorizer.grants if grant.binds(user)]


@pytest.fixture(scope="module")
def observed(observation: Observation) -> RequestLog:
    return observation.requests


def _permissions(grant: Grant) -> set[tuple[str, str, str]]:
    return {permission for rule in grant.rules for permission in rule.permissions()}


def test_the_scenario_runs_in_the_manifests_namespace() -> None:
    objects = render(MANIFESTS)
    namespaces = [obj["metadata"]["name"] for obj in find(objects, "Namespace")]
    assert namespaces == [OPERATOR_NAMESPACE]
    deployment = find(objects, "Deployment", "kopf-csi")[0]
    assert deployment["metadata"]["namespace"] == OPERATOR_NAMESPACE
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == ACCOUNT
    accounts = [obj["metadata"] for obj in find(rbac(), "ServiceAccount")]
    assert accounts == [{"name": ACCOUNT, "namespace": OPERATOR_NAMESPACE, **_labels(accounts)}]


def _labels(accounts: list[dict]) -> dict:
    return {"labels": accounts[0]["labels"]} if "labels" in accounts[0] else {}


def test_no_request_is_forbidden(observation: Observation) -> None:
    assert len(observation.requests) > 20, "the scenario made suspiciously few requests"
    denials = observation.authorizer.denials
    assert not denials, "the API refused the operator's requests (403):\n" + "\n".join(denials)


def test_every_binding_has_its_role(granted: list[Grant]) -> None:
    assert {grant.binding for grant in granted} == {
        "ClusterRoleBinding/kopf-csi",
        "RoleBinding/kopf-csi/kopf-csi",
        "ClusterRoleBinding/kopf-csi-namespace-quota",
    }
    empty = [grant.binding for grant in granted if not grant.rules]
    assert not empty, f"bindings to roles that do not exist or have no rules: {empty}"


def test_every_permission_is_needed(observation: Observation, granted: list[Grant]) -> None:
    unused: list[str] = []
    for grant in granted:
        decided = [
            access
            for (binding, access) in observation.authorizer.uses
            if binding == grant.binding and isinstance(access, Access)
        ]
        for group, resource, verb in sorted(_permissions(grant)):
            if (group, resource, verb) in ALLOWED_UNOBSERVED:
                continue
            uses = [
                access
                for access in decided
                if (access.group, access.rbac_resource, access.verb) == (group, resource, verb)
            ]
            if not uses:
                unused.append(f"{grant.role}: {verb} {group or 'core'}/{resource} never used")
            elif grant.namespace is None and all(
                use.namespace == OPERATOR_NAMESPACE for use in uses
            ):
                unused.append(
                    f"{grant.role}: {verb} {group or 'core'}/{resource} used only in "
                    f"{OPERATOR_NAMESPACE}: grant it in the Role instead"
                )
    assert not unused, "RBAC grants more than the operator uses:\n" + "\n".join(unused)


def test_the_allow_list_is_not_stale(observed: RequestLog, granted: list[Grant]) -> None:
    granted_permissions = {p for grant in granted for p in _permissions(grant)}
    seen = {(access.group, access.rbac_resource, access.verb) for access in observed}
    for permission, reason in ALLOWED_UNOBSERVED.items():
        assert reason.strip(), f"{permission}: say why it is needed"
        assert permission in granted_permissions, f"{permission} is allow-listed, not granted"
        assert permission not in seen, f"{permission} was observed: drop it from the allow-list"


def test_no_broad_or_dangerous_rules(granted: list[Grant]) -> None:
    for grant in granted:
        for rule in grant.rules:
            assert not rule.urls, f"{grant.role}: non-resource URLs (discovery is granted anyway)"
            for group, resource, verb in rule.permissions():
                assert "*" not in (group, resource, verb), f"{grant.role}: a wildcard"
                assert verb not in ("escalate", "bind", "impersonate"), f"{grant.role}: {verb}"


def test_only_discovery_outside_resources(observed: RequestLog) -> None:
    paths = {path for _, path in observed.non_resource}
    assert paths, "no discovery at all: is the request log wired in?"
    odd = [
        path
        for path in paths
        if not (path in ("/api", "/apis", "/version") or path.startswith(("/api/", "/apis/")))
    ]
    assert not odd, f"non-resource requests beyond discovery: {odd}"
