"""The RBAC `kopf-csi migrate` adds: what kopf-csi needs and the chart's ServiceAccount lacks.

We test these aspects:
- kopf-csi's rules in `migration.rbac` are those of manifests/base/rbac.yaml (which
  tests/manifests/test_rbac.py checks against what the operator really asks for);
- for every shape, the chart's RBAC plus the added objects let the ServiceAccount do all of it,
  as the emulated API's RBAC authorizer decides: the cluster-wide permissions in another
  namespace too, the namespaced ones in the workload's namespace;
- only what is missing is added, and the chart's own RBAC objects are not edited;
- a stream without RBAC (`kubectl get deploy -o yaml`) gets every rule, with a note.
"""

from __future__ import annotations

import pathlib

import pytest
import yaml

from kopf_csi.migration import rbac
from kopf_csi.testing.authorization import Authorizer, Request, service_account
from kopf_csi.testing.requestlog import Access

from .conftest import SHAPES, migrated, objects, text_of, workload

BASE = pathlib.Path(__file__).resolve().parents[2] / "manifests" / "base" / "rbac.yaml"


def _base(kind: str) -> set[tuple[str, str, str]]:
    [role] = [obj for obj in yaml.safe_load_all(BASE.read_text()) if obj["kind"] == kind]
    return rbac.permissions(role["rules"])


def test_the_rules_are_the_base_manifests() -> None:
    assert rbac.permissions(rbac.CLUSTER_RULES) == _base("ClusterRole")
    assert rbac.permissions(rbac.NAMESPACE_RULES) == _base("Role")


def _allowed(authorizer: Authorizer, account: tuple[str, str], permission: tuple[str, str, str],
             namespace: str | None) -> bool:  # fmt: skip
    group, resource, verb = permission
    main, _, sub = resource.partition("/")
    access = Access(verb, group, main, sub or None, namespace)
    request = Request(verb, f"/{group}/{resource}", access)
    return authorizer.decide(service_account(*account), request) is not None


@pytest.mark.parametrize("shape", SHAPES)
def test_the_account_can_do_everything_kopf_csi_does(shape: str) -> None:
    result = migrated(shape)
    spec = workload(result.text)["spec"]["template"]["spec"]
    namespace = workload(result.text)["metadata"]["namespace"]
    account = (namespace, spec["serviceAccountName"])
    before = Authorizer(objects(text_of(shape)))
    after = Authorizer(objects(result.text))
    lacked = [p for p in sorted(rbac.permissions(rbac.CLUSTER_RULES))
              if not _allowed(before, account, p, "elsewhere")]  # fmt: skip
    assert lacked  # something to add in every shape
    for permission in rbac.permissions(rbac.CLUSTER_RULES):
        assert _allowed(after, account, permission, "elsewhere"), permission
        assert _allowed(after, account, permission, None), permission
    for permission in rbac.permissions(rbac.NAMESPACE_RULES):
        assert _allowed(after, account, permission, namespace), permission
    added = {p for obj in result.rbac if "rules" in obj for p in rbac.permissions(obj["rules"])}
    granted_before = {
        p for p in rbac.permissions((*rbac.CLUSTER_RULES, *rbac.NAMESPACE_RULES))
        if _allowed(before, account, p, "elsewhere") and _allowed(before, account, p, namespace)
    }  # fmt: skip
    assert not added & granted_before  # only what was missing


def test_hostpath_gets_exactly_what_its_chart_lacks() -> None:
    result = migrated("hostpath")
    roles = {obj["kind"]: obj for obj in result.rbac}
    assert set(roles) == {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
    assert roles["Role"]["rules"] == [
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "create", "patch"]}
    ]  # leases and csistoragecapacities: the chart's Role has them
    assert roles["ClusterRoleBinding"]["subjects"] == [
        {"kind": "ServiceAccount", "name": "csi-hostpathplugin-sa", "namespace": "default"}
    ]
    assert ("", "persistentvolumes", "create") not in rbac.permissions(
        roles["ClusterRole"]["rules"]
    )


def test_a_stream_without_rbac_gets_every_rule_with_a_note() -> None:
    result = migrated("rook-ceph")
    added = {p for obj in result.rbac if "rules" in obj for p in rbac.permissions(obj["rules"])}
    assert added == rbac.permissions((*rbac.CLUSTER_RULES, *rbac.NAMESPACE_RULES))
    assert any("no RBAC for ServiceAccount rook-ceph/rook-csi-provisioner-sa" in note
               for note in result.notes)  # fmt: skip
