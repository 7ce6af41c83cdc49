"""Fixtures for the reference driver: a running driver on a real unix socket, and its stubs.

`start` (tests/conftest.py) starts a driver from `driver_config` with any overrides
(`await start(features=Features(...))`);
`driver` is one with attach on; `controller`, `groups`, `node`, `identity` are generated grpclib
stubs on one channel to the most recently started driver.
"""

from __future__ import annotations

import pathlib
from collections.abc import AsyncIterator

import pytest
from driver_helpers import NODE, Start
from grpclib.client import Channel

from kopf_csi.csi._generated.csi import v1 as csi
from kopf_csi.driver import Driver, DriverConfig, Features


@pytest.fixture
def data_dir(tmp_path: pathlib.Path) -> pathlib.Path:
    return tmp_path / "data"


@pytest.fixture
def driver_config(data_dir: pathlib.Path) -> DriverConfig:
    return DriverConfig(
        node_id=NODE,
        data_dir=data_dir,
        known_nodes=frozenset({"node-2", "node-3"}),
        features=Features(attach=True),
        durable=False,  # fsync costs real milliseconds and proves nothing here
    )


@pytest.fixture
async def driver(start: Start) -> Driver:
    return await start()


@pytest.fixture
async def channel(socket_path: pathlib.Path) -> AsyncIterator[Channel]:
    channel = Channel(path=str(socket_path))
    yield channel
    channel.close()


@pytest.fixture
def identity(channel: Channel) -> csi.IdentityStub:
    return csi.IdentityStub(channel)


@pytest.fixture
def controller(channel: Channel) -> csi.ControllerStub:
    return csi.ControllerStub(channel)


@pytest.fixture
def groups(channel: Channel) -> csi.GroupControllerStub:
    return csi.GroupControllerStub(channel)


@pytest.fixture
def node(channel: Channel) -> csi.NodeStub:
    return csi.NodeStub(channel)
