"""`kit_rbac`: the kit authorizes the operator as a cluster does, when a test asks for it.

We test these aspects:
- the example modules work under the shipped RBAC plus their declared rules: the operator's
  requests are made as its ServiceAccount, none is refused, and namespace_quota's declared
  ClusterRole decides its watch of Namespaces;
- in a user's project, a module's read that nothing grants fails the test, quoting the API
  server's 403 (even though the module shrugged the error off), and the same read declared
  passes.
"""

from __future__ import annotations

import pathlib
import textwrap
from typing import Any

import pytest

from kopf_csi import rbac
from kopf_csi.driver import Driver
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


@pytest.mark.kit_rbac
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

pytestmark = pytest.mark.kit_rbac


@pytest.fixture
def handler_modules():
    return DEFAULT_MODULES + ("myproject.{module}",)


async def test_it_starts(operator):
    assert operator.alive
"""


def test_an_undeclared_read_fails_the_users_test_with_the_403(tmp_path: pathlib.Path) -> None:
    ini = "[pytest]\nasyncio_default_fixture_loop_scope = function\n"
    (tmp_path / "pytest.ini").write_text(ini)
    (tmp_path / "myproject").mkdir()
    for module, declaration in (("undeclared", ""), ("declared", DECLARED)):
        code = PEEKING.format(declaration=declaration)
        (tmp_path / "myproject" / f"{module}.py").write_text(textwrap.dedent(code))
        (tmp_path / f"test_{module}.py").write_text(USER_TEST.format(module=module))
    result = run_pytest(tmp_path)
    out = result.stdout + result.stderr
    assert "PASSED test_declared.py::test_it_starts" in out, out
    assert "ERROR test_undeclared.py::test_it_starts" in out, out
    assert (
        'configmaps is forbidden: User "system:serviceaccount:kopf-csi:kopf-csi" cannot list'
        ' resource "configmaps" in API group "" in the namespace "default"'
    ) in out, out
    assert "(kit_rbac; modules: myproject.undeclared)" in out, out
