"""End-to-end fixtures for `kopf-csi explain`: the operator (with leader election and its HTTP
endpoint), the reference driver, the KCM stand-in, and explain run as a process.

The operator runs as in the Deployment: as its ServiceAccount (the kit's `kit_rbac`),
`--leader-election` (its Lease in its own namespace, `kopf-csi`) and `--http-endpoint` (on a free
port), with short retries so that failures show within a second. explain runs with the test's
`kubeconfig`, cluster-admin's, as a user's kubectl would.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import pathlib
import re
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest

from kopf_csi import rbac
from kopf_csi.settings import (
    CSISettings,
    HTTPSettings,
    LeaderElectionSettings,
    ProvisionerOptions,
    Settings,
)
from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.operator import OperatorThread

from ..provisioner.conftest import node_objects, settled

IDENTITY = "replica-a"
LEASE_NAMESPACE = rbac.NAMESPACE  # the operator's (kit_rbac)


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return dataclasses.replace(
        settings,
        csi=CSISettings(address=settings.csi.address, timeout=1.0, connect_timeout=10.0),
        provisioner=ProvisionerOptions(retry_interval_start=0.2, retry_interval_max=1.0),
        leader_election=LeaderElectionSettings(
            enabled=True,
            namespace=LEASE_NAMESPACE,
            identity=IDENTITY,
            lease_duration=15.0,
            renew_deadline=10.0,
            retry_period=2.0,
        ),
        http=HTTPSettings(endpoint="127.0.0.1:0"),
    )


@pytest.fixture(autouse=True)
def nodes(cluster: EmulatedCluster) -> None:
    node, csinode = node_objects("node-1")
    cluster.create("nodes", node)
    cluster.create("csinodes", csinode)


@pytest.fixture
async def operator(
    operator: OperatorThread, cluster: EmulatedCluster
) -> AsyncIterator[OperatorThread]:
    yield operator
    await settled(cluster)


@pytest.fixture
def operator_url(operator: OperatorThread) -> str:
    return str(operator.memo.http_server.url)


@dataclasses.dataclass
class Run:
    code: int
    stdout: str
    stderr: str

    @property
    def first_line(self) -> str:
        return self.stdout.splitlines()[0] if self.stdout else ""

    @property
    def evidence(self) -> list[str]:
        lines = self.stdout.splitlines()
        start = lines.index("Evidence:") + 1
        end = lines.index("Next:") if "Next:" in lines else len(lines)
        return [line.strip() for line in lines[start:end]]


async def run_explain(*args: str, env: dict[str, str] | None = None) -> Run:
    """`python -m kopf_csi explain ARGS` as a process."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "kopf_csi", "explain", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **(env or {})},
    )  # fmt: skip
    stdout, stderr = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return Run(process.returncode, stdout.decode(), stderr.decode())


@dataclasses.dataclass
class Explained:
    text: Run
    json: dict[str, Any]


@pytest.fixture
def explain(kubeconfig: pathlib.Path) -> Any:
    """Explain a target in both forms; the two must agree (content and exit code). The two
    processes run side by side: each is mostly its interpreter's start-up (0.5-1 s of CPU),
    and they look at the cluster within the same moment."""

    async def explain(target: str, *extra: str) -> Explained:
        text, as_json = await asyncio.gather(
            run_explain(target, "--kubeconfig", str(kubeconfig), *extra),
            run_explain(target, "--kubeconfig", str(kubeconfig), "-o", "json", *extra),
        )
        return Explained(text, json.loads(as_json.stdout))

    return explain


def in_flight(rpc: str, timeout: float) -> re.Pattern[str]:
    """What explain says of a held call: `CreateVolume in flight for 12.3s (timeout 30s)`."""
    return re.compile(rf"{rpc} in flight for \d+\.\ds \(timeout {timeout:g}s\)")


def _durations_apart(text: str) -> str:
    """`in flight for 12.3s` → `in flight for N.Ns`, `in work for 5m12s` → `in work for N`:
    what differs between two runs."""
    text = re.sub(r"\d+\.\ds\b", "N.Ns", text)
    return re.sub(r"\b\d+h(?:\d+m)?\b|\b\d+m(?:\d+s)?\b|\b\d+s\b", "N", text)


async def until_explained(explain: Any, target: str, blocker: str, *extra: str) -> Explained:
    """Explain until the verdict names `blocker` (the operator and KCM get there in time)."""
    deadline = asyncio.get_running_loop().time() + 20
    while True:
        found: Explained = await explain(target, *extra)
        wanted = (
            found.json["state"] == "healthy" if not blocker else found.json["blocker"] == blocker
        )
        if wanted and _durations_apart(found.text.first_line).endswith(
            _durations_apart(found.json["summary"])
        ):
            # The two forms agree: the same verdict (up to the seconds a call or a queue has
            # been running, which grow between the two runs), exit code and number of facts.
            assert found.text.code == found.json["exit_code"], found.text
            assert len(found.text.evidence) == len(found.json["evidence"]), found.text.stdout
            return found
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"never {blocker or 'healthy'}: {found.text.stdout}")
        await asyncio.sleep(0.2)
