"""kopf-csi's pytest plugin: test your handler modules the way kopf-csi tests its own.

Installing kopf-csi registers this plugin (the `pytest11` entry point `kopf_csi`), so these
fixtures are there in any test suite, with nothing to import. Everything is real: an emulated
Kubernetes API over local HTTP, the reference CSI driver on a unix socket, kopf in a thread.

- `cluster`: the emulated Kubernetes API (`EmulatedCluster`); `kubeconfig`: a file for it;
- `kcm`: the kube-controller-manager stand-in (binds claims, releases volumes, attaches);
- `driver`: the reference CSI driver (`driver_config` to change its features or faults);
- `operator`: kopf running `handler_modules` against both, with `settings`.

Override `handler_modules` to add yours to the defaults, and `settings` to change options:

    @pytest.fixture
    def handler_modules():
        return DEFAULT_MODULES + ("myproject.handlers.quota",)

`until()` waits for a condition (the end-to-end tests' only way to wait), and `seed_node()`
registers a Node and its CSINode as kubelet and the node-driver-registrar would. Tests marked
`kind` are skipped, saying why, where Docker or kind are missing.

Fixtures of the same name in a suite's own conftest.py take precedence over these.
"""

from __future__ import annotations

import asyncio
import pathlib
import shutil
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from kopf_csi.driver import Driver, DriverConfig, Features, running_driver
from kopf_csi.settings import CSISettings, KubeSettings, Settings
from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.kcm import ControllerManager
from kopf_csi.testing.operator import DEFAULT_MODULES, OperatorThread, running_operator

__all__ = ["DRIVER_NAME", "NODE", "TOPOLOGY_KEY", "seed_node", "until"]

DRIVER_NAME = "hostpath.csi.kopf.dev"
NODE = "node-1"
TOPOLOGY_KEY = "topology.hostpath.csi.kopf.dev/node"


async def until(predicate: Callable[[], Any], *, timeout: float = 10.0) -> Any:
    """Poll until `predicate()` is truthy and return its value; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not (result := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"not true within {timeout}s: {predicate}")
        await asyncio.sleep(0.02)
    return result


def seed_node(cluster: EmulatedCluster, name: str = NODE, *, driver: str = DRIVER_NAME) -> None:
    """A Node with our topology label and its CSINode entry for the driver."""
    cluster.create(
        "nodes",
        {"apiVersion": "v1", "kind": "Node",
         "metadata": {"name": name, "labels": {TOPOLOGY_KEY: name}}},
    )  # fmt: skip
    cluster.create(
        "csinodes",
        {"apiVersion": "storage.k8s.io/v1", "kind": "CSINode", "metadata": {"name": name},
         "spec": {"drivers": [{"name": driver, "nodeID": name, "topologyKeys": [TOPOLOGY_KEY]}]}},
    )  # fmt: skip


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "kind: needs Docker and the kind binary; skipped if absent")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked `kind` need Docker and kind; skip them, saying so, where either is absent."""
    missing = [tool for tool in ("docker", "kind") if shutil.which(tool) is None]
    if not missing:
        return
    skip = pytest.mark.skip(reason=f"needs {' and '.join(missing)} (not installed here)")
    for item in items:
        if item.get_closest_marker("kind") is not None:  # the marker, not a `kind` keyword
            item.add_marker(skip)


@pytest.fixture
async def cluster() -> AsyncIterator[EmulatedCluster]:
    async with EmulatedCluster() as cluster:
        yield cluster


@pytest.fixture
def kubeconfig(cluster: EmulatedCluster, tmp_path: pathlib.Path) -> pathlib.Path:
    return cluster.write_kubeconfig(tmp_path / "kubeconfig")


@pytest.fixture
async def kcm(cluster: EmulatedCluster) -> AsyncIterator[ControllerManager]:
    async with ControllerManager(cluster) as kcm:
        yield kcm


@pytest.fixture
def socket_path(tmp_path: pathlib.Path) -> pathlib.Path:
    return tmp_path / "csi.sock"


@pytest.fixture
def driver_config(tmp_path: pathlib.Path) -> DriverConfig:
    return DriverConfig(
        node_id=NODE,
        data_dir=tmp_path / "driver",
        known_nodes=None,
        features=Features(attach=True),
        durable=False,
    )


@pytest.fixture
async def driver(driver_config: DriverConfig, socket_path: pathlib.Path) -> AsyncIterator[Driver]:
    async with running_driver(driver_config, socket_path=socket_path, grace=0.1) as driver:
        yield driver


@pytest.fixture
def handler_modules() -> tuple[str, ...]:
    return DEFAULT_MODULES


@pytest.fixture
def settings(kubeconfig: pathlib.Path, socket_path: pathlib.Path) -> Settings:
    return Settings(
        csi=CSISettings(address=f"unix://{socket_path}", timeout=5.0, connect_timeout=10.0),
        kube=KubeSettings(kubeconfig=kubeconfig),
    )


@pytest.fixture
async def operator(
    settings: Settings, driver: Driver, handler_modules: tuple[str, ...]
) -> AsyncIterator[OperatorThread]:
    async with running_operator(settings=settings, modules=handler_modules) as operator:
        yield operator
