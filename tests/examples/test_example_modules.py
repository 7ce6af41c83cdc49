"""The example handler modules, tested the way a user tests their own module.

Only the fixtures of kopf-csi's pytest plugin are used (`cluster`, `kcm`, `driver`, `operator`,
`handler_modules`, `settings`): nothing from this repository's own test helpers. The README's
"Testing a handler module" points here.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from kopf_csi.api import ProvisionerOptions, Settings
from kopf_csi.driver import Driver
from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.pytest_plugin import DEFAULT_MODULES, DRIVER_NAME, NODE, until
from kopf_csi_handlers.examples.claim_labels import label_parameters
from kopf_csi_handlers.examples.namespace_quota import ANNOTATION, bound_requests, refusal

EXAMPLES = ("kopf_csi_handlers.examples.claim_labels", "kopf_csi_handlers.examples.namespace_quota")


@pytest.fixture
def handler_modules() -> tuple[str, ...]:
    return DEFAULT_MODULES + EXAMPLES


@pytest.fixture
def settings(settings: Settings) -> Settings:
    fast = ProvisionerOptions(retry_interval_start=0.05, retry_interval_max=0.3)
    return dataclasses.replace(settings, provisioner=fast)


@pytest.fixture
def cluster_nodes() -> tuple[str, ...]:
    """The kit's own default, as a user has it (this suite's conftest starts clusters empty).

    The driver reports topology, so claims need a node to land on."""
    return (NODE,)


async def known(operator: Any, namespace: str) -> None:
    """The operator has seen the namespace's limit and the class, as it would have long before
    a user's claim in a real cluster (both come from watches)."""
    await until(lambda: namespace in operator.memo.namespace_limits.limits)
    await until(lambda: "fast" in operator.memo.caches.storage_classes)


def storage_class(cluster: EmulatedCluster, **parameters: str) -> None:
    cluster.create(
        "storageclasses",
        {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
         "metadata": {"name": "fast"}, "provisioner": DRIVER_NAME, "parameters": parameters,
         "reclaimPolicy": "Delete", "volumeBindingMode": "Immediate"},
    )  # fmt: skip


def claim(
    cluster: EmulatedCluster, name: str, size: str, *, namespace: str = "default", **labels: str
) -> dict[str, Any]:
    return cluster.create(
        "persistentvolumeclaims",
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
         "metadata": {"name": name, "namespace": namespace, "labels": labels},
         "spec": {"storageClassName": "fast", "accessModes": ["ReadWriteOnce"],
                  "resources": {"requests": {"storage": size}}}},
    )  # fmt: skip


def volume_of(cluster: EmulatedCluster, name: str, namespace: str = "default") -> str | None:
    pvc = cluster.get("persistentvolumeclaims", namespace, name)
    return pvc.get("spec", {}).get("volumeName") if pvc else None


def events_of(cluster: EmulatedCluster, name: str, reason: str) -> list[str]:
    return [
        event.get("message", "")
        for event in cluster.objects("events")
        if event.get("involvedObject", {}).get("name") == name and event.get("reason") == reason
    ]


def backend_parameters(driver: Driver, volume_name: str) -> dict[str, str]:
    pv_handle = next(v for v in driver.state.volumes.values() if v.name == volume_name)
    return dict(pv_handle.parameters)


# -- the pure parts ----------------------------------------------------------------------------


def test_label_parameters_takes_only_the_prefixed_labels() -> None:
    claim_body = {"metadata": {"labels": {
        "parameters.kopf-csi.kopf.dev/tier": "gold", "parameters.kopf-csi.kopf.dev/": "x",
        "app": "db", "other.example.com/tier": "silver",
    }}}  # fmt: skip
    assert label_parameters(claim_body) == {"tier": "gold"}
    assert label_parameters({"metadata": {}}) == {}


def test_bound_requests_counts_the_bound_claims_by_uid() -> None:
    def pvc(uid: str, size: str, volume: str | None) -> dict[str, Any]:
        spec = {"resources": {"requests": {"storage": size}}, "volumeName": volume}
        return {"metadata": {"uid": uid}, "spec": spec}

    claims = [pvc("a", "1Mi", "pv-a"), pvc("b", "2Mi", None), pvc("c", "lots", "pv-c")]
    assert bound_requests(claims) == {"a": 2**20, "c": 0}


def test_refusal_compares_bytes_and_names_the_limit() -> None:
    assert refusal("team-a", None, 10**12) is None
    assert refusal("team-a", "1Gi", 2**30) is None
    message = refusal("team-a", "1Gi", 2**30 + 1)
    assert message is not None
    assert "team-a" in message
    assert "1Gi" in message
    assert "invalid" in (refusal("team-a", "lots", 1) or "")


# -- end to end: kopf, the emulated API, the reference driver ----------------------------------


async def test_claim_labels_reach_the_driver_and_the_class_wins(
    cluster: EmulatedCluster, kcm: Any, driver: Driver, operator: Any
) -> None:
    storage_class(cluster, tier="bronze", zone="z1")
    claim(cluster, "labelled", "1Mi", **{
        "parameters.kopf-csi.kopf.dev/owner": "team-a",
        "parameters.kopf-csi.kopf.dev/tier": "gold",
        "unrelated": "yes",
    })  # fmt: skip
    volume = await until(lambda: volume_of(cluster, "labelled"))
    assert backend_parameters(driver, volume) == {"tier": "bronze", "zone": "z1", "owner": "team-a"}


async def test_quota_refuses_with_an_event_and_a_raised_limit_lets_it_through(
    cluster: EmulatedCluster, kcm: Any, driver: Driver, operator: Any
) -> None:
    cluster.create(
        "namespaces", {"metadata": {"name": "team-a", "annotations": {ANNOTATION: "1Mi"}}}
    )
    storage_class(cluster)
    await known(operator, "team-a")
    claim(cluster, "small", "1Mi", namespace="team-a")
    claim(cluster, "big", "2Mi", namespace="team-a")
    claim(cluster, "elsewhere", "2Mi")  # no limit in "default"
    await until(lambda: volume_of(cluster, "small", "team-a") and volume_of(cluster, "elsewhere"))
    messages = await until(lambda: events_of(cluster, "big", "ProvisioningFailed"))
    assert "above the 1Mi limit of namespace team-a" in messages[0]
    assert volume_of(cluster, "big", "team-a") is None
    assert len(driver.state.volumes) == 2  # nothing was created for the refused claim

    cluster.patch("namespaces", None, "team-a", {"metadata": {"annotations": {ANNOTATION: "2Mi"}}})
    assert await until(lambda: volume_of(cluster, "big", "team-a"), timeout=15)


async def test_a_broken_limit_refuses_and_says_why(
    cluster: EmulatedCluster, kcm: Any, driver: Driver, operator: Any
) -> None:
    cluster.create(
        "namespaces", {"metadata": {"name": "team-b", "annotations": {ANNOTATION: "lots"}}}
    )
    storage_class(cluster)
    await known(operator, "team-b")
    claim(cluster, "any", "1Mi", namespace="team-b")
    messages = await until(lambda: events_of(cluster, "any", "ProvisioningFailed"))
    assert "invalid quota.kopf-csi.kopf.dev/max-volume-size annotation: 'lots'" in messages[0]
    assert not driver.state.volumes
