"""The diagnostics HTTP server (`--http-endpoint`): metrics, liveness, readiness.

It starts first and on its own: it waits for neither the driver nor leadership, so that the
kubelet's probes work while the driver is still connecting and while a standby replica waits
for its lease. It stops last, in its own cleanup handler. `memo.metrics` (`kopf_csi.metrics`)
exists whether or not the endpoint is on; `memo.http_server` is the running server, if any.
"""

from __future__ import annotations

from typing import Any

import kopf

from kopf_csi import endpoints, metrics, runtime


@kopf.on.startup(id="observability.serve")
async def serve(memo: kopf.Memo, **_: Any) -> None:
    settings = runtime.settings_from_memo(memo)
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
    server: endpoints.Endpoints | None = getattr(memo, "http_server", None)
    if server is not None:
        await server.stop()
