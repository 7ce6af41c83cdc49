"""Fixtures of the leader-election tests: fast durations, a client, replicas that may wait.

The durations are the Go defaults (15 s / 10 s / 5 s) scaled down so that a takeover fits into
a test's few seconds: a Lease of 2 s, renewed every 0.2 s, given up after 1 s without renewal.
`start_replica()` starts an operator without waiting for it to lead (a standby replica is not
"ready" in kopf's sense until it holds its Leases); `stop_replica()` stops it either way.
"""

from __future__ import annotations

import asyncio
import dataclasses
import pathlib
from collections.abc import AsyncIterator, Sequence

import pytest

from kopf_csi import kube
from kopf_csi.leadership import Elector
from kopf_csi.settings import LeaderElectionSettings, ProvisionerOptions, Settings
from kopf_csi.testing.operator import OperatorThread

from ..conftest import until

FAST = LeaderElectionSettings(
    enabled=True, lease_duration=2.0, renew_deadline=1.0, retry_period=0.2
)
MODULES = (
    "kopf_csi_handlers.lifecycle",
    "kopf_csi_handlers.caches",
    "kopf_csi_handlers.provisioner",
)


@pytest.fixture
async def api(kubeconfig: pathlib.Path) -> AsyncIterator[kube.KubeClient]:
    async with await kube.KubeClient.connect(kubeconfig) as api:
        yield api


@pytest.fixture
def handler_modules() -> tuple[str, ...]:
    return MODULES


@pytest.fixture
def settings(settings: Settings) -> Settings:
    options = ProvisionerOptions(retry_interval_start=0.05, retry_interval_max=0.5)
    return dataclasses.replace(settings, provisioner=options, leader_election=FAST)


def replica_settings(settings: Settings, identity: str, **changes: float) -> Settings:
    election = dataclasses.replace(settings.leader_election, identity=identity, **changes)
    return dataclasses.replace(settings, leader_election=election)


class Replica:
    """One operator replica: its thread, and the task of its (possibly long) start-up."""

    def __init__(self, operator: OperatorThread) -> None:
        self.operator = operator
        self.starting = asyncio.create_task(operator.start())

    @property
    def memo(self) -> object:
        return self.operator.memo

    @property
    def elector(self) -> Elector | None:
        return getattr(self.operator.memo, "leadership", None)

    @property
    def is_leader(self) -> bool:
        elector = self.elector
        return elector is not None and elector.is_leader

    @property
    def working(self) -> bool:
        """The controllers started: the queues exist (only after the Leases are held)."""
        return getattr(self.operator.memo, "claims_queue", None) is not None

    async def wait_standby(self, timeout: float = 20.0) -> Elector:
        """Until it contends for its Leases (connected to the driver and the API)."""
        elector: Elector = await until(lambda: self.elector, timeout=timeout)
        return elector

    async def wait_leading(self, timeout: float = 20.0) -> None:
        await asyncio.wait_for(asyncio.shield(self.starting), timeout)
        assert self.is_leader

    async def stop(self) -> None:
        await self.operator.stop()
        await self.starting  # it returns once the thread has ended, leader or not


def start_replica(settings: Settings, identity: str, modules: Sequence[str] = MODULES) -> Replica:
    operator = OperatorThread(
        settings=replica_settings(settings, identity), modules=modules, start_timeout=120.0
    )
    return Replica(operator)
