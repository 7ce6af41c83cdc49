"""The shared end-to-end fixtures come from kopf-csi's own pytest plugin.

`kopf_csi.testing.pytest_plugin` (registered by the package's `pytest11` entry point) provides
`cluster`, `kubeconfig`, `kcm`, `driver`, `driver_config`, `operator`, `handler_modules` and
`settings`, and skips `kind` tests without Docker: the same fixtures users get for testing
their own handler modules. Test directories override `driver_config`, `settings` and
`handler_modules` in their own conftest.py. The helpers are re-exported here for the tests,
and `kopf_csi.testing.spies` adds the driver spies `calls` and `secrets_seen`. `start` starts
reference drivers from `driver_config` with overrides, for the tests of the driver and the client.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import pathlib
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import pytest

from kopf_csi.driver import Driver, DriverConfig
from kopf_csi.testing.pytest_plugin import DRIVER_NAME, NODE, TOPOLOGY_KEY, seed_node, until

__all__ = [
    "DRIVER_NAME",
    "NODE",
    "TOPOLOGY_KEY",
    "Start",
    "field_managers",
    "kopf_run_environment",
    "seed_node",
    "stopped_cleanly",
    "until",
]


def field_managers(obj: Mapping[str, Any]) -> set[tuple[str, str | None]]:
    """(manager, subresource) of every `managedFields` entry: who wrote the object, and where."""
    entries = obj["metadata"].get("managedFields") or []
    return {(entry["manager"], entry.get("subresource")) for entry in entries}


@pytest.fixture
def cluster_nodes() -> tuple[str, ...]:
    """The suite's clusters start empty (the kit's start with a node): each test seeds the
    nodes it needs, and some test what happens with none."""
    return ()


def kopf_run_environment(kubeconfig: pathlib.Path, socket_path: pathlib.Path) -> dict[str, str]:
    """The environment of a `kopf run` against the emulated API and the driver, without any
    KOPF_CSI_ variable a developer may have set."""
    return {
        **{name: value for name, value in os.environ.items() if not name.startswith("KOPF_CSI_")},
        "KUBECONFIG": str(kubeconfig),
        "CSI_ADDRESS": f"unix://{socket_path}",
        "POD_NAMESPACE": "default",
        "PYTHONPATH": str(pathlib.Path(__file__).resolve().parent.parent),
    }


pytest_plugins = ("kopf_csi.testing.spies",)  # the driver spies `calls` and `secrets_seen`


async def stopped_cleanly(process: asyncio.subprocess.Process) -> str:
    """SIGTERM to a `kopf-csi run` still running; its stderr, once it exited 0 without a
    traceback."""
    if process.returncode is None:
        process.send_signal(signal.SIGTERM)
    _, stderr = await asyncio.wait_for(process.communicate(), 30)
    log = stderr.decode()
    assert process.returncode == 0, log[-3000:]
    assert "Traceback" not in log, log[-3000:]
    return log


Start = Callable[..., Awaitable[Driver]]
"""The `start` fixture: `await start(**config_overrides)` → a running driver."""


@pytest.fixture
async def start(driver_config: DriverConfig, socket_path: pathlib.Path) -> AsyncIterator[Start]:
    """`await start(limits=Limits(...))`: `driver_config` with overrides, started on the test's
    socket; every driver started is stopped at the end."""
    drivers: list[Driver] = []

    async def start(**overrides: Any) -> Driver:
        driver = Driver(dataclasses.replace(driver_config, **overrides), socket_path=socket_path)
        await driver.start()
        drivers.append(driver)
        return driver

    yield start
    for driver in drivers:
        await driver.stop(grace=0.1)
