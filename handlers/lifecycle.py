"""Start-up and shutdown: log in, connect to the driver, and report health.

Every other handler module depends on what this one puts into the memo:
`memo.settings` (Settings), `memo.csi` (CSIClient) and `memo.driver` (DriverInfo).
"""

from __future__ import annotations

from typing import Any

import kopf
import structlog

from kopf_csi import runtime
from kopf_csi.csi import CSIClient

log = structlog.get_logger("kopf_csi.lifecycle")


@kopf.on.login(id="lifecycle.login")
async def login(memo: kopf.Memo, **_: Any) -> kopf.ConnectionInfo:
    return await runtime.connection_info(runtime.settings_from_memo(memo))


@kopf.on.startup(id="lifecycle.connect")
async def connect(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    config = runtime.settings_from_memo(memo)
    runtime.configure_kopf(settings)
    client = CSIClient(config.csi.address, timeout=config.csi.timeout)
    await client.wait_ready(wait=config.csi.connect_timeout)
    memo.csi = client
    memo.driver = info = await client.driver_info()
    log.info(
        "driver_connected",
        driver=info.name,
        version=info.vendor_version,
        plugin_capabilities=sorted(info.plugin_capabilities),
        controller_capabilities=sorted(info.controller_capabilities),
    )


@kopf.on.cleanup(id="lifecycle.disconnect")
async def disconnect(memo: kopf.Memo, **_: Any) -> None:
    client = getattr(memo, "csi", None)
    if client is not None:
        await client.close()


@kopf.on.probe(id="driver")
async def driver_ready(memo: kopf.Memo, **_: Any) -> str:
    """Liveness includes the driver: a failing Probe fails the operator's health check."""
    client: CSIClient = memo.csi
    response = await client.probe()
    return "ready" if response.ready is None or response.ready else "not-ready"
