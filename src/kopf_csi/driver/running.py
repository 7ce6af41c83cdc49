"""A driver instance in this process: start, stop, restart; the in-process API for tests.

    async with running_driver(DriverConfig(node_id="n1", data_dir=tmp), socket_path=sock) as driver:
        driver.faults.fail("CreateVolume", Code.UNAVAILABLE, times=1)
        ...
        await driver.restart()  # same data dir: every volume, snapshot and attachment survives

`driver.state` is the live record store (read it; change it only through RPCs), `driver.faults`
the live fault rules. One socket serves Identity, Controller, GroupController and Node, as
hostpath does.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
from collections.abc import AsyncIterator

import structlog

from kopf_csi.csi import serving
from kopf_csi.driver.backend import Backend
from kopf_csi.driver.calllog import CallLog
from kopf_csi.driver.calls import CallWrapper
from kopf_csi.driver.config import DriverConfig
from kopf_csi.driver.controller import ControllerServicer
from kopf_csi.driver.faults import Faults
from kopf_csi.driver.groupcontroller import GroupControllerServicer
from kopf_csi.driver.groups import drop_orphaned_members
from kopf_csi.driver.identity import IdentityServicer
from kopf_csi.driver.node import NodeServicer
from kopf_csi.driver.state import State

__all__ = ["Driver", "running_driver"]

logger = structlog.get_logger("kopf_csi.driver")


class Driver:
    """One driver: a config, a socket, the faults; the backend is rebuilt at every start."""

    def __init__(
        self,
        config: DriverConfig,
        *,
        socket_path: str | os.PathLike[str],
        faults: Faults | None = None,
        calls: CallLog | None = None,
    ) -> None:
        self.config = config
        self.socket_path = pathlib.Path(socket_path)
        self.faults = faults or Faults(path=config.faults_file, seed=config.faults_seed)
        self.calls = calls
        """What each volume-changing call did, across restarts (`calllog`); None: not kept."""
        self._backend: Backend | None = None
        self._serving: serving.Serving | None = None
        self._calls: CallWrapper | None = None

    @property
    def backend(self) -> Backend:
        if self._backend is None:
            raise RuntimeError("the driver is not running")
        return self._backend

    @property
    def state(self) -> State:
        return self.backend.state

    @property
    def is_running(self) -> bool:
        return self._serving is not None

    async def start(self) -> None:
        if self._serving is not None:
            raise RuntimeError("the driver is already running")
        backend = Backend(self.config, faults=self.faults, calls=self.calls)
        drop_orphaned_members(backend)
        calls = CallWrapper(self.faults)
        servicers = [
            IdentityServicer(backend),
            ControllerServicer(backend),
            GroupControllerServicer(backend),
            NodeServicer(backend, node_id=self.config.node_id),
        ]
        self._serving = await serving.serve(servicers, path=self.socket_path, interceptor=calls)
        self._backend, self._calls = backend, calls
        logger.info(
            "driver_started",
            name=self.config.name,
            node_id=self.config.node_id,
            socket=str(self.socket_path),
            data_dir=str(self.config.data_dir),
            volumes=len(backend.state.volumes),
            snapshots=len(backend.state.snapshots),
            group_snapshots=len(backend.state.groups),
        )

    async def stop(self, *, grace: float = 5.0) -> None:
        """Finish running calls (up to `grace` seconds), close, remove the socket; idempotent."""
        if self._serving is None:
            return
        serving_, self._serving = self._serving, None
        if self._calls is not None:
            self._calls.release_hangs()
        await serving_.stop(grace=grace)
        self._backend = None
        logger.info("driver_stopped", socket=str(self.socket_path))

    def release_hangs(self) -> None:
        """End the calls an injected hang holds now (UNAVAILABLE), and every later hang at
        once, as a stop does, while the driver keeps serving. For the end of a test: a held
        call would otherwise keep the operator's stop waiting its grace for work in flight."""
        if self._calls is not None:
            self._calls.release_hangs()

    async def restart(self, *, grace: float = 5.0) -> None:
        """Stop and start again from the data directory, as a crashed-and-restarted pod would."""
        await self.stop(grace=grace)
        await self.start()


@contextlib.asynccontextmanager
async def running_driver(
    config: DriverConfig,
    *,
    socket_path: str | os.PathLike[str],
    faults: Faults | None = None,
    calls: CallLog | None = None,
    grace: float = 5.0,
) -> AsyncIterator[Driver]:
    """A started driver, stopped on exit."""
    driver = Driver(config, socket_path=socket_path, faults=faults, calls=calls)
    await driver.start()
    try:
        yield driver
    finally:
        await driver.stop(grace=grace)
