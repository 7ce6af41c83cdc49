"""The diagnostics HTTP server (`--http-endpoint`): metrics, liveness, readiness.

It starts first and on its own: it waits for neither the driver nor leadership, so that the
kubelet's probes work while the driver is still connecting and while a standby replica waits
for its lease. It stops last, in its own cleanup handler. `memo.metrics` (`kopf_csi.metrics`)
exists whether or not the endpoint is on; `memo.http_server` is the running server, if any.
The event loop's lag is sampled from here on too (`kopf_csi_event_loop_lag_seconds`), as the
loop's busiest time may be its start.
"""

from __future__ import annotations

from typing import Any

import kopf

from kopf_csi import endpoints, looplag, metrics, runtime

LAG_INTERVAL = 0.1
"""Seconds between the loop-lag probe's timers (10 a second: about 20 µs of CPU a second)."""


@kopf.on.startup(id="observability.serve")
async def serve(memo: kopf.Memo, **_: Any) -> None:
    settings = runtime.settings_from_memo(memo)
    if getattr(memo, "loop_lag", None) is None:  # once, should kopf run this handler again
        memo.loop_lag = looplag.LagProbe(metrics.from_memo(memo).loop_lagged, interval=LAG_INTERVAL)
    memo.loop_lag.start()
    endpoints.health_checks(memo)
    memo.http_server = None
    if not settings.http.endpoint:
        return
    server = endpoints.Endpoints(
        endpoint=settings.http.endpoint,
        metrics_path=settings.http.metrics_path,
        metrics=metrics.from_memo(memo),
        memo=memo,
        probe_timeout=min(settings.csi.timeout, endpoints.PROBE_TIMEOUT),
    )
    try:
        await server.start()
    except (OSError, ValueError) as exc:
        raise kopf.PermanentError(f"cannot serve --http-endpoint: {exc}") from exc
    memo.http_server = server


@kopf.on.cleanup(id="observability.stop")
async def stop(memo: kopf.Memo, **_: Any) -> None:
    probe: looplag.LagProbe | None = getattr(memo, "loop_lag", None)
    if probe is not None:
        probe.stop()
    server: endpoints.Endpoints | None = getattr(memo, "http_server", None)
    if server is not None:
        await server.stop()
