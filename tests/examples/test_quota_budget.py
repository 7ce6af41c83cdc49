"""The namespace_quota example's storage budget under concurrency: 50 claims at once.

The provisioner works on up to `--worker-threads` (100) claims at once, so the hooks of 50
claims of one namespace run together; each claim fits the budget on its own. The hook's
`context.reserve` checks and holds in one step: exactly as many as fit are provisioned.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from kopf_csi.api import ProvisionerOptions, Settings
from kopf_csi.driver import Driver
from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.pytest_plugin import DEFAULT_MODULES, NODE, until
from kopf_csi_handlers.examples.namespace_quota import BUDGET_ANNOTATION

from .test_example_modules import claim, events_of, storage_class


@pytest.fixture
def handler_modules() -> tuple[str, ...]:
    return (*DEFAULT_MODULES, "kopf_csi_handlers.examples.namespace_quota")


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """Refused claims retried every second at most: 40 claims retrying faster would keep the
    API budget busy, and their events (which give way to the work) would come late."""
    slow = ProvisionerOptions(retry_interval_start=1.0, retry_interval_max=5.0)
    return dataclasses.replace(settings, provisioner=slow)


@pytest.fixture
def cluster_nodes() -> tuple[str, ...]:
    return (NODE,)


def phase_counts(cluster: EmulatedCluster, namespace: str) -> dict[str, int]:
    claims = [
        c for c in cluster.objects("persistentvolumeclaims")
        if c["metadata"]["namespace"] == namespace
    ]  # fmt: skip
    bound = sum(1 for c in claims if c.get("status", {}).get("phase") == "Bound")
    refused = sum(
        1 for c in claims if events_of(cluster, c["metadata"]["name"], "ProvisioningFailed")
    )
    return {"bound": bound, "refused": refused}


async def test_a_budget_holds_for_fifty_claims_at_once(
    cluster: EmulatedCluster, kcm: Any, driver: Driver, operator: Any
) -> None:
    """50 claims of 1Mi posted at once against a 10Mi budget: exactly 10 are Bound, the 40
    others refused. Counting only the claims bound, without the holds, all 50 passed."""
    cluster.create(
        "namespaces", {"metadata": {"name": "team-c", "annotations": {BUDGET_ANNOTATION: "10Mi"}}}
    )
    storage_class(cluster)
    await until(lambda: "team-c" in operator.memo.namespace_limits.budgets)
    await until(lambda: "fast" in operator.memo.caches.storage_classes)
    for index in range(50):
        claim(cluster, f"claim-{index}", "1Mi", namespace="team-c")
    counts = await until(
        lambda: (c := phase_counts(cluster, "team-c"))["bound"] + c["refused"] == 50 and c,
        timeout=30,
    )
    assert counts == {"bound": 10, "refused": 40}
    assert len(driver.state.volumes) == 10
    refused = next(
        c["metadata"]["name"] for c in cluster.objects("persistentvolumeclaims")
        if events_of(cluster, c["metadata"]["name"], "ProvisioningFailed")
    )  # fmt: skip
    message = events_of(cluster, refused, "ProvisioningFailed")[0]
    assert "namespace team-c has 10Mi of its 10Mi budget in use or reserved" in message
