"""`--kube-api-qps` and `--kube-api-burst` in the running operator.

kopf running the real handler modules against the emulated API and the reference driver, with
a low limit: every claim is still provisioned, and the provisioner's requests beyond its burst
waited for their turn in its own bucket (the client-side limit itself: tests/test_throttling.py).
"""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from kopf_csi import names
from kopf_csi.settings import Settings
from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.operator import OperatorThread

from .conftest import make_claim, make_storage_class, wait_for_bound

pytestmark = pytest.mark.usefixtures("kcm")

QPS = 10.0
BURST = 4
CLAIMS = 20


@pytest.fixture
def settings(settings: Settings) -> Settings:
    kube = dataclasses.replace(settings.kube, qps=QPS, burst=BURST)
    return dataclasses.replace(settings, kube=kube)


async def test_a_burst_of_claims_is_provisioned_within_the_limit(
    cluster: EmulatedCluster, operator: OperatorThread
) -> None:
    await make_storage_class(cluster, operator)
    limits = operator.memo.api.limits
    assert (limits.qps, limits.burst) == (QPS, BURST)
    bucket = limits.buckets[names.MANAGER_PROVISIONER]
    before = _written(cluster)
    loop = asyncio.get_running_loop()
    started = loop.time()
    claims = [make_claim(cluster, f"data-{i}") for i in range(CLAIMS)]
    for claim in claims:
        await wait_for_bound(cluster, claim, timeout=30.0)
    elapsed = loop.time() - started

    # The writes the server received from the provisioner (its PVs, the journal, the events
    # that went already): at most the burst at once, the rest at the QPS.
    written = _written(cluster) - before
    assert written >= CLAIMS  # each claim's PV
    assert bucket.delayed >= 1
    assert bucket.waited > 0
    assert elapsed >= (written - BURST) / QPS * 0.9


def _written(cluster: EmulatedCluster) -> int:
    """Every write the emulated API received from the provisioner role so far."""
    return sum(
        n for (manager, _, _), n in cluster.writes.items() if manager == names.MANAGER_PROVISIONER
    )
