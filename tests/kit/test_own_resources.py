"""A user's module on a resource of their own, tested with the kit: the CRD is created as a
user applies it, and the emulated API serves its resource from then on (as a real server, once
the CRD is established). The operator finds resources at start-up (kopf's runtime scanning is
off), so the CRD is created before it starts: in an override of `cluster`.
"""

from __future__ import annotations

from typing import Any

import pytest

from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.operator import DEFAULT_MODULES, OperatorThread
from kopf_csi.testing.pytest_plugin import until

CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "backuprequests.example.com"},
    "spec": {
        "group": "example.com",
        "scope": "Namespaced",
        "names": {"plural": "backuprequests", "singular": "backuprequest", "kind": "BackupRequest"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                    }
                },
                "subresources": {"status": {}},
            }
        ],
    },
}


@pytest.fixture
def cluster(cluster: EmulatedCluster) -> EmulatedCluster:
    cluster.create("customresourcedefinitions", CRD)
    return cluster


@pytest.fixture
def handler_modules() -> tuple[str, ...]:
    return (*DEFAULT_MODULES, "tests.kit.own_resource")


def phase(cluster: EmulatedCluster) -> Any:
    request = cluster.get("backuprequests", "default", "nightly") or {}
    return (request.get("status") or {}).get("phase")


async def test_a_module_on_its_own_resource_reacts_to_it(
    cluster: EmulatedCluster, operator: OperatorThread
) -> None:
    cluster.create(
        "backuprequests",
        {"apiVersion": "example.com/v1", "kind": "BackupRequest",
         "metadata": {"name": "nightly", "namespace": "default"}, "spec": {"claim": "data"}},
    )  # fmt: skip
    assert await until(lambda: phase(cluster)) == "Accepted: data"
