"""Fixtures of the monitoring tests: Prometheus' own tools, and a real Prometheus on 127.0.0.1.

`prometheus` and `promtool` come from Debian's `prometheus` package (`nox -s tests` installs it
when promtool is missing). Without them the tests that need them fail, saying what to install:
they are not skipped, so that CI cannot pass without having run them.

`Prometheus` runs the server as a child process with a configuration of the test's own (a
scrape every second, rules evaluated every second), its data in the test's tmp_path, and asks
it over its HTTP API, as Grafana and Alertmanager do.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import pathlib
import shutil
import socket
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp
import pytest
import yaml

from devtools.monitoring import files

from ..conftest import NODE

RULES = files.MONITORING / "prometheus" / "kopf-csi.rules.yaml"
PROMETHEUS_RULE = files.MONITORING / "component" / "prometheusrule.yaml"
DASHBOARD = files.MONITORING / "component" / "dashboard.json"
MISSING = (
    "{tool} is not installed (not on PATH): the monitoring tests run Prometheus' own tools."
    " Install Debian's prometheus package (`apt-get install prometheus`), as `nox -s tests`"
    " does when promtool is missing."
)


@pytest.fixture
def cluster_nodes() -> tuple[str, ...]:
    """A node before the operator starts, so that claims are placed (the driver reports
    topology)."""
    return (NODE,)


def _binary(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        pytest.fail(MISSING.format(tool=tool), pytrace=False)
    return path


@pytest.fixture(scope="session")
def promtool() -> str:
    return _binary("promtool")


@pytest.fixture(scope="session")
def prometheus_binary() -> str:
    return _binary("prometheus")


def write_yaml(path: pathlib.Path, document: Mapping[str, Any]) -> pathlib.Path:
    path.write_text(yaml.safe_dump(dict(document), sort_keys=False))
    return path


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Prometheus:
    """A Prometheus server scraping `targets` as job `kopf-csi`, with `rules` loaded."""

    def __init__(self, binary: str, workdir: pathlib.Path) -> None:
        self.binary = binary
        self.workdir = workdir
        self.url = ""
        self.log = workdir / "prometheus.log"
        self._process: asyncio.subprocess.Process | None = None

    async def start(
        self, *, targets: list[str], rules: pathlib.Path, labels: Mapping[str, str]
    ) -> None:
        config = {
            "global": {
                "scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s",
            },
            "rule_files": [str(rules)],
            "scrape_configs": [{
                "job_name": "kopf-csi",
                "static_configs": [{"targets": targets, "labels": dict(labels)}],
            }],
        }  # fmt: skip
        path = write_yaml(self.workdir / "prometheus.yml", config)
        port = _free_port()
        self.url = f"http://127.0.0.1:{port}"
        with self.log.open("wb") as log:
            self._process = await asyncio.create_subprocess_exec(
                self.binary, f"--config.file={path}", f"--web.listen-address=127.0.0.1:{port}",
                f"--storage.tsdb.path={self.workdir / 'data'}", "--log.level=warn",
                stdout=log, stderr=log,
            )  # fmt: skip
        await self._until_ready()

    async def _until_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        async with aiohttp.ClientSession() as session:
            while True:
                assert self._process is not None
                if self._process.returncode is not None:
                    raise AssertionError(f"prometheus exited:\n{self.log.read_text()[-3000:]}")
                with contextlib.suppress(aiohttp.ClientError):
                    async with session.get(f"{self.url}/-/ready") as response:
                        if response.status == 200:
                            return
                if time.monotonic() > deadline:
                    raise AssertionError(f"prometheus not ready in {timeout:g}s: {self.log}")
                await asyncio.sleep(0.1)

    async def stop(self) -> None:
        process = self._process
        if process is None or process.returncode is not None:
            return
        process.terminate()
        try:
            await asyncio.wait_for(process.wait(), 10)
        except TimeoutError:
            process.kill()
            await process.wait()

    async def api(self, path: str, **params: str) -> Any:
        """GET /api/v1/<path>; its `data`, once the answer says success."""
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"{self.url}/api/v1/{path}", params=params) as response,
        ):
            body = await response.json()
        assert body.get("status") == "success", f"{path} {params}: {body}"
        return body["data"]

    async def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's result: the samples (an empty list when it returns no data)."""
        data = await self.api("query", query=expr)
        result = data["result"]
        return result if data["resultType"] in ("vector", "matrix") else [{"value": result}]

    async def alerts(self, name: str) -> list[dict[str, Any]]:
        """The alerts of that name, pending or firing, as /api/v1/alerts lists them."""
        data = await self.api("alerts")
        return [alert for alert in data["alerts"] if alert["labels"]["alertname"] == name]

    async def evaluations(self) -> float:
        """When the newest rule group was last evaluated (Unix time, 0 before the first)."""
        data = await self.api("rules")
        stamps = [group.get("lastEvaluation", "") for group in data["groups"]]
        return max((_unix(stamp) for stamp in stamps), default=0.0)


def _unix(stamp: str) -> float:
    """RFC 3339 with nanoseconds (Go's), as Unix time; 0 for Go's zero time."""
    if not stamp or stamp.startswith("0001-"):
        return 0.0
    head, _, fraction = stamp.removesuffix("Z").partition(".")
    seconds = datetime.datetime.fromisoformat(head).replace(tzinfo=datetime.UTC).timestamp()
    return seconds + float(f"0.{fraction or 0}")


@pytest.fixture
async def prometheus(prometheus_binary: str, tmp_path: pathlib.Path) -> AsyncIterator[Prometheus]:
    server = Prometheus(prometheus_binary, tmp_path)
    try:
        yield server
    finally:
        await server.stop()
