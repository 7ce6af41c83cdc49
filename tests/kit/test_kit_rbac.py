"""`kit_rbac`: the kit authorizes the operator as a cluster does, by default.

We test these aspects:
- the example modules work under the shipped RBAC plus their declared rules, with no marker:
  the operator's requests are made as its ServiceAccount, none is refused, and
  namespace_quota's declared ClusterRole decides its watch of Namespaces;
- the test's own `kubeconfig` is cluster-admin's (it reads what the operator may not; it
  sends no credentials, as kubectl sends none over plain HTTP), and the operator's is
  `operator_kubeconfig`, its ServiceAccount's;
- in a user's project, with no marker, a new module's read that nothing grants fails the
  test, quoting the API server's 403 (even though the module shrugged the error off) and the
  declaration that would grant it; the same read declared passes, and so does a test marked
  `kit_rbac(False)`; `settings` that give the operator the test's admin kubeconfig fail,
  saying so, instead of running it all-powerful unnoticed;
- the suggested declarations: `namespaced` in the operator's namespace, `cluster` elsewhere,
  verbs gathered by resource, the group after the plural, nothing for non-resource URLs.
"""

from __future__ import annotations

import pathlib
import textwrap
from typing import Any

import pytest
from kubernetes_asyncio import client, config

from kopf_csi import rbac
from kopf_csi.driver import Driver
from kopf_csi.testing import permissions
from kopf_csi.testing.authorization import ADMIN, Authorizer
from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.pytest_plugin import DEFAULT_MODULES, DRIVER_NAME, NODE, until

from .test_plugin import run_pytest

EXAMPLES = ("kopf_csi_handlers.examples.claim_labels", "kopf_csi_handlers.examples.namespace_quota")


@pytest.fixture
def cluster_nodes() -> tuple[str, ...]:
    return (NODE,)  # the kit's default (the suite's conftest starts clusters empty)


@pytest.fixture
def handler_modules() -> tuple[str, ...]:
    return DEFAULT_MODULES + EXAMPLES


async def test_the_examples_work_under_the_shipped_and_declared_rbac(
    cluster: EmulatedCluster, kcm: Any, driver: Driver, operator: Any
) -> None:
    assert operator.settings.kube.namespace == rbac.NAMESPACE
    cluster.create(
        "storageclasses",
        {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
         "metadata": {"name": "fast"}, "provisioner": DRIVER_NAME},
    )  # fmt: skip
    cluster.create(
        "persistentvolumeclaims",
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
         "metadata": {"name": "data", "namespace": "default"},
         "spec": {"storageClassName": "fast", "accessModes": ["ReadWriteOnce"],
                  "resources": {"requests": {"storage": "1Mi"}}}},
    )  # fmt: skip
    await until(lambda: cluster.objects("persistentvolumes"), timeout=20)
    authorizer = cluster.authorizer
    assert authorizer is not None
    assert authorizer.denials == []
    deciders = {binding for binding, _ in authorizer.uses}
    assert "ClusterRoleBinding/kopf-csi" in deciders  # the shipped RBAC
    assert "ClusterRoleBinding/kopf-csi-namespace-quota" in deciders  # the declared rules


async def test_the_tests_kubeconfig_is_the_admins_and_the_operators_its_own(
    cluster: EmulatedCluster, kubeconfig: pathlib.Path, operator_kubeconfig: pathlib.Path
) -> None:
    cluster.create("secrets", {"metadata": {"name": "s", "namespace": "kube-system"}})
    api = await config.new_client_from_config(config_file=str(kubeconfig))
    async with api:
        found = await client.CoreV1Api(api).list_secret_for_all_namespaces()
    assert [secret.metadata.name for secret in found.items] == ["s"]
    assert cluster.authorizer is not None
    assert {binding for binding, _ in cluster.authorizer.uses} == {
        "ClusterRoleBinding/cluster-admin"
    }
    assert operator_kubeconfig != kubeconfig  # the operator's: its ServiceAccount's token


def _refused(*requests: tuple[str, str, dict[str, str]]) -> Authorizer:
    authorizer = permissions.authorizer_for(DEFAULT_MODULES)
    operator = f"Bearer {authorizer.login(permissions.OPERATOR)}"
    admin = f"Bearer {authorizer.login(ADMIN)}"
    for method, path, query in requests:
        assert authorizer.check(method, path, query, admin) is None
        assert authorizer.check(method, path, query, None) is None  # the test's: no credentials
        authorizer.check(method, path, query, operator)
    return authorizer


def test_the_suggested_declarations_follow_the_refused_requests() -> None:
    authorizer = _refused(
        ("GET", "/api/v1/namespaces/default/configmaps", {}),
        ("GET", "/api/v1/namespaces/default/configmaps", {"watch": "true"}),
        ("DELETE", "/api/v1/namespaces/kopf-csi/configmaps/settings", {}),
        ("PATCH", "/apis/snapshot.storage.k8s.io/v1/namespaces/x/volumesnapshots/s/status", {}),
        ("GET", "/metrics", {}),
    )
    assert len(authorizer.denials) == 5  # the shipped RBAC grants none of these
    assert permissions.declarations(authorizer.refused) == [
        'api.rbac.cluster("configmaps", "list", "watch", why="...")',
        'api.rbac.namespaced("configmaps", "delete", why="...")',
        'api.rbac.cluster("volumesnapshots/status.snapshot.storage.k8s.io", "patch", why="...")',
    ]
    message = permissions.refusals(authorizer, (*DEFAULT_MODULES, "myproject.peek"))
    assert "(kit_rbac, the default; modules: myproject.peek)" in message
    assert 'cannot get path "/metrics"' in message
    assert '      api.rbac.namespaced("configmaps", "delete", why="..."),' in message


PEEKING = """
import kopf
from kopf_csi import api
{declaration}

@kopf.on.startup()
async def peek(memo, **_):
    try:
        await memo.api.list(api.CONFIGMAPS, "default")
    except api.KubeError:
        pass  # shrugged off: the kit fails the test anyway
"""
DECLARED = 'api.rbac.declare(api.rbac.cluster(api.CONFIGMAPS, "list", why="its settings"))'
USER_TEST = """
import pytest
from kopf_csi.testing.pytest_plugin import DEFAULT_MODULES


@pytest.fixture
def handler_modules():
    return DEFAULT_MODULES + ("myproject.{module}",)


async def test_it_starts(operator):
    assert operator.alive


@pytest.mark.kit_rbac(False)  # the test says why: here, to see that the opt-out works
async def test_it_starts_all_powerful(operator):
    assert operator.settings.kube.namespace == "default"
"""
ADMIN_SETTINGS = """
import dataclasses
import pytest


@pytest.fixture
def settings(settings, kubeconfig):
    kube = dataclasses.replace(settings.kube, kubeconfig=kubeconfig)
    return dataclasses.replace(settings, kube=kube)


async def test_the_operator_as_admin(operator):
    pass
"""


def test_an_undeclared_read_fails_the_users_test_with_the_403(tmp_path: pathlib.Path) -> None:
    ini = "[pytest]\nasyncio_default_fixture_loop_scope = function\n"
    (tmp_path / "pytest.ini").write_text(ini)
    (tmp_path / "myproject").mkdir()
    for module, declaration in (("undeclared", ""), ("declared", DECLARED)):
        code = PEEKING.format(declaration=declaration)
        (tmp_path / "myproject" / f"{module}.py").write_text(textwrap.dedent(code))
        (tmp_path / f"test_{module}.py").write_text(USER_TEST.format(module=module))
    (tmp_path / "test_admin_settings.py").write_text(ADMIN_SETTINGS)
    result = run_pytest(tmp_path)
    out = result.stdout + result.stderr
    assert "PASSED test_declared.py::test_it_starts" in out, out
    assert "ERROR test_declared.py" not in out, out
    assert "ERROR test_undeclared.py::test_it_starts -" in out, out
    assert "PASSED test_undeclared.py::test_it_starts_all_powerful" in out, out
    assert "ERROR test_undeclared.py::test_it_starts_all_powerful" not in out, out
    assert (
        'configmaps is forbidden: User "system:serviceaccount:kopf-csi:kopf-csi" cannot list'
        ' resource "configmaps" in API group "" in the namespace "default"'
    ) in out, out
    assert "(kit_rbac, the default; modules: myproject.undeclared)" in out, out
    assert 'api.rbac.cluster("configmaps", "list", why="...")' in out, out
    assert "ERROR test_admin_settings.py::test_the_operator_as_admin" in out, out
    assert "give it `kubeconfig` (the test's, cluster-admin)" in out, out
