"""kubernetes-asyncio leader election (LeaseLock): the Lease is created, then renewed by PUT."""

from __future__ import annotations

import asyncio
import contextlib

from kubernetes_asyncio import client
from kubernetes_asyncio.leaderelection import electionconfig, leaderelection
from kubernetes_asyncio.leaderelection.resourcelock.leaselock import LeaseLock

from kopf_csi.testing.emulator import EmulatedCluster


async def test_lease_is_created_and_renewed(
    cluster: EmulatedCluster, api: client.ApiClient
) -> None:
    leading = asyncio.Event()

    async def on_started() -> None:
        leading.set()

    async def on_stopped() -> None:
        pass

    lock = LeaseLock("kopf-csi", "default", "candidate-1", api)
    # The library's minimums: retry_period >= 1, renew_deadline > 1.2 * retry_period.
    config = electionconfig.Config(lock, 3, 2, 1, on_started, on_stopped)
    election = asyncio.create_task(leaderelection.LeaderElection(config).run())
    try:
        await asyncio.wait_for(leading.wait(), 5)
        lease = cluster.get("leases", "default", "kopf-csi")
        assert lease is not None
        assert lease["spec"]["holderIdentity"] == "candidate-1"
        assert lease["spec"]["leaseDurationSeconds"] == 3

        renewed = await cluster.wait_for(
            "leases",
            "default",
            "kopf-csi",
            lambda obj: obj is not None and obj["spec"]["renewTime"] != lease["spec"]["renewTime"],
            timeout=5,
        )
        assert renewed is not None
        assert renewed["spec"]["holderIdentity"] == "candidate-1"
        assert int(renewed["metadata"]["resourceVersion"]) > int(
            lease["metadata"]["resourceVersion"]
        )
        assert renewed["metadata"]["uid"] == lease["metadata"]["uid"]  # replaced, not re-created
    finally:
        election.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await election
