"""Fixtures for the observability tests: the operator with its HTTP endpoint on, and scraping.

The operator runs the default handler modules with `--http-endpoint=127.0.0.1:0` (a free
port); tests reach `/metrics`, `/healthz`, `/readyz` over real HTTP, as Prometheus and the
kubelet do, and parse the metrics with Prometheus' own text parser.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator, Iterable, Mapping

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from kopf_csi.settings import CSISettings, HTTPSettings, ProvisionerOptions, Settings
from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.operator import OperatorThread

from ..conftest import NODE
from ..provisioner.conftest import settled

CSI_TIMEOUT = 1.0


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return dataclasses.replace(
        settings,
        csi=CSISettings(address=settings.csi.address, timeout=CSI_TIMEOUT, connect_timeout=10.0),
        provisioner=ProvisionerOptions(retry_interval_start=0.05, retry_interval_max=0.5),
        http=HTTPSettings(endpoint="127.0.0.1:0"),
    )


@pytest.fixture
def cluster_nodes() -> tuple[str, ...]:
    """A node before the operator starts (topology: the driver reports node segments): seeded
    later, a claim could reach the operator before its CSINode and fail once, uncounted here."""
    return (NODE,)


@pytest.fixture
async def operator(
    cluster: EmulatedCluster, operator: OperatorThread
) -> AsyncIterator[OperatorThread]:
    yield operator
    await settled(cluster)


async def get(operator: OperatorThread, path: str) -> tuple[int, str, str]:
    """GET a path of the operator's HTTP endpoint: (status, content type, body)."""
    url = operator.memo.http_server.url + path
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return response.status, response.headers.get("Content-Type", ""), await response.text()


async def scrape(operator: OperatorThread) -> list[Sample]:
    """Every sample of `/metrics`, parsed as Prometheus parses it."""
    status, content_type, text = await get(operator, "/metrics")
    assert status == 200
    assert content_type.startswith("text/plain; version=0.0.4")
    return [sample for family in text_string_to_metric_families(text) for sample in family.samples]


def value(samples: Iterable[Sample], name: str, /, **labels: str) -> float | None:
    """The value of the one sample with this name and exactly these labels, or None."""
    found = [s.value for s in samples if s.name == name and s.labels == labels]
    assert len(found) <= 1, f"{name}{labels} is ambiguous: {found}"
    return found[0] if found else None


def labelled(samples: Iterable[Sample], name: str, /, **labels: str) -> list[Mapping[str, str]]:
    """The label sets of the samples named `name` that include `labels`."""
    return [s.labels for s in samples if s.name == name and labels.items() <= s.labels.items()]


async def scrape_until(
    operator: OperatorThread, name: str, at_least: float, *, timeout: float = 5.0
) -> list[Sample]:
    """Scrape until a sample named `name` reaches `at_least` (counted after the object went)."""
    deadline = time.monotonic() + timeout
    while True:
        samples = await scrape(operator)
        if any(s.name == name and s.value >= at_least for s in samples):
            return samples
        if time.monotonic() > deadline:
            raise AssertionError(f"{name} did not reach {at_least} within {timeout}s")
        await asyncio.sleep(0.05)
