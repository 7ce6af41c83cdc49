"""The RBAC in manifests/ against what the operator really asks the API for.

The operator runs once for this directory (`scenarios.observe`: every module of DEFAULT_MODULES,
the emulated API over HTTP, the reference driver) and the emulator classifies each request as
RBAC sees it. Then:

- every request it made is allowed by the rendered RBAC, in the right scope (cluster-wide, or
  in the operator's own namespace through the Role);
- every permission the RBAC grants was used, or is in ALLOWED_UNOBSERVED with its reason;
  cluster-wide permissions must have been used outside the operator's namespace (else they
  belong in the Role);
- ALLOWED_UNOBSERVED holds nothing stale: each entry is granted and was not observed;
- no rule grants a wildcard, `escalate`, `bind` or `impersonate`;
- the request log held no non-resource request but API discovery (which every authenticated
  user may do).
"""

from __future__ import annotations

import pytest

from kopf_csi.testing.requestlog import Access, RequestLog

from .rendering import MANIFESTS, Grant, find, grants, permissions, render
from .scenarios import OPERATOR_NAMESPACE, Observation

ACCOUNT = "kopf-csi"

# Permissions granted although the scenario cannot observe them: (group, resource, verb),
# each with the reason. Keep it short; prefer making the scenario reach the path.
ALLOWED_UNOBSERVED: dict[tuple[str, str, str], str] = {
    ("snapshot.storage.k8s.io", "volumesnapshots", "list"): (
        "the provisioner's orphaned snapshot-source sweep lists every VolumeSnapshot, every "
        "SNAPSHOT_SWEEP_INTERVAL (5 min, fixed in handlers/provisioner.py); the run lasts "
        "seconds. Without it the sweep fails quietly and protection finalizers can linger."
    ),
}


@pytest.fixture(scope="module")
def objects() -> list[dict]:
    return render(MANIFESTS)


@pytest.fixture(scope="module")
def granted(objects: list[dict]) -> list[Grant]:
    namespace = find(objects, "Namespace")[0]["metadata"]["name"]
    return grants(objects, account=ACCOUNT, namespace=namespace)


@pytest.fixture(scope="module")
def observed(observation: Observation) -> RequestLog:
    return observation.requests


def _allowing(granted: list[Grant], access: Access) -> list[Grant]:
    return [grant for grant in granted if grant.matching(access)]


def test_the_scenario_runs_in_the_manifests_namespace(objects: list[dict]) -> None:
    namespaces = [obj["metadata"]["name"] for obj in find(objects, "Namespace")]
    assert namespaces == [OPERATOR_NAMESPACE]
    deployment = find(objects, "Deployment", "kopf-csi")[0]
    assert deployment["metadata"]["namespace"] == OPERATOR_NAMESPACE
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == ACCOUNT


def test_every_request_is_allowed(observed: RequestLog, granted: list[Grant]) -> None:
    assert len(observed) > 20, "the scenario made suspiciously few requests"
    denied = [str(access) for access in observed if not _allowing(granted, access)]
    assert not denied, "the operator made requests its RBAC does not allow:\n" + "\n".join(denied)


def test_every_permission_is_needed(observed: RequestLog, granted: list[Grant]) -> None:
    unused: list[str] = []
    for grant in granted:
        for group, resource, verb in permissions(grant):
            if (group, resource, verb) in ALLOWED_UNOBSERVED:
                continue
            uses = [
                access
                for access in observed
                if access.verb == verb
                and access.group == group
                and access.rbac_resource == resource
                and (grant.namespace is None or access.namespace == grant.namespace)
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
    granted_permissions = {p for grant in granted for p in permissions(grant)}
    seen = {(access.group, access.rbac_resource, access.verb) for access in observed}
    for permission, reason in ALLOWED_UNOBSERVED.items():
        assert reason.strip(), f"{permission}: say why it is needed"
        assert permission in granted_permissions, f"{permission} is allow-listed, not granted"
        assert permission not in seen, f"{permission} was observed: drop it from the allow-list"


def test_no_broad_or_dangerous_rules(granted: list[Grant]) -> None:
    for grant in granted:
        for group, resource, verb in permissions(grant):
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
