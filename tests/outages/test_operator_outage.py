"""The operator through a control-plane restart under a burst: nothing hangs, nothing is lost,
nothing is noisy.

On a real control plane restarted 0.5 s into a burst of 200 claims, kopf-csi 9dcf7ca bound 152
and never the other 48, and wrote about 700 warning lines (issue 30). Here the emulated API
server drains (some requests served, some answered 503, some connections reset; the watches
end), is gone (connects refused), and comes back, in the middle of a burst of claims, with
Go's retry intervals. We test these aspects:
- every claim is Bound after the server is back (how soon is `nox -s chaos`'s figure, and
  the wake-up on return is `tests/test_queueing.py`'s), one PV each, and exactly one CreateVolume
  per claim (a PV whose POST was refused is saved again as made; one whose POST landed
  unanswered is read first), one DeleteVolume per volume;
- the outage is logged as one warning when it starts and one when it ends, and no work
  failure is logged with a traceback;
- no task's exception is lost (the kit fails the test otherwise);
- then the claims are deleted through a second restart: every PV and every driver volume goes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import pytest
import structlog

from kopf_csi.driver import Driver
from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.operator import OperatorThread
from kopf_csi.testing.spies import Calls

from ..conftest import until
from ..provisioner.conftest import NAMESPACE, make_claim, make_pod, make_storage_class

pytestmark = pytest.mark.usefixtures("kcm")

CLAIMS = 60
CONVERGE = 30.0  # a bound for a busy machine; the time it takes is measured by `nox -s chaos`


async def _through_a_restart(
    cluster: EmulatedCluster, count: int, act: Callable[[int], object]
) -> None:
    """`act(index)` for each index, a few milliseconds apart, the API server restarting (0.5 s
    of draining, 1 s gone) from a quarter of the way on; returns once it is back."""
    restart: asyncio.Task[None] | None = None
    for index in range(count):
        act(index)
        if index == count // 4:
            restart = asyncio.create_task(cluster.restart_apiserver(drain=0.5, gone=1.0))
        await asyncio.sleep(0.005)
    assert restart is not None
    await restart


def _bound(cluster: EmulatedCluster) -> int:
    claims = cluster.objects("persistentvolumeclaims", namespace=NAMESPACE)
    return sum((c.get("status") or {}).get("phase") == "Bound" for c in claims)


def _noise(logs: list[dict[str, object]]) -> list[dict[str, object]]:
    """Warning lines other than the outage's own two, and any line with a traceback."""
    return [
        entry
        for entry in logs
        if (entry["log_level"] in ("warning", "error", "critical")
            and entry["event"] not in ("api_unreachable", "api_reachable"))
        or "exc_info" in entry
    ]  # fmt: skip


async def test_a_restart_mid_create_and_mid_delete_leaves_nothing_behind(
    cluster: EmulatedCluster,
    operator: OperatorThread,
    driver: Driver,
    caplog: pytest.LogCaptureFixture,
    calls: Calls,
) -> None:
    cluster.write_latency = 0.005
    await make_storage_class(cluster, operator)
    with structlog.testing.capture_logs() as logs:
        await _through_a_restart(cluster, CLAIMS, lambda i: make_claim(cluster, f"c{i:03}"))
        await until(lambda: _bound(cluster) == CLAIMS, timeout=CONVERGE)
        assert cluster.control_plane.answered_503
        assert cluster.control_plane.reset

        volumes = cluster.objects("persistentvolumes")
        assert len(volumes) == CLAIMS
        assert len(driver.state.volumes) == CLAIMS
        # Never a second CreateVolume: a PV whose POST was refused is saved again as it was
        # made, one whose POST landed unanswered is read first.
        assert calls.count("CreateVolume") == CLAIMS

        await _through_a_restart(
            cluster,
            CLAIMS,
            lambda i: cluster.delete("persistentvolumeclaims", NAMESPACE, f"c{i:03}"),
        )
        await until(lambda: not cluster.objects("persistentvolumes"), timeout=CONVERGE)
        await until(lambda: not driver.state.volumes, timeout=5)
        assert calls.count("DeleteVolume") == CLAIMS

    outages = [e["event"] for e in logs if str(e["event"]).startswith("api_")
               and e["log_level"] == "warning"]  # fmt: skip
    # The second restart came within `reachability.QUIET_AGAIN` of the first one's end: the
    # same trouble going on, counted but not told again.
    assert outages == ["api_unreachable", "api_reachable"], outages
    assert operator.memo.api.reachability.outages >= 2
    noise = _noise(logs)

    assert not noise, sorted({(e["event"], str(e.get("error"))[:150]) for e in noise})
    loud = [(r.name, r.getMessage()[:100]) for r in caplog.records if r.levelno >= logging.WARNING]
    assert not loud, loud  # kopf's own retries included


ATTACHED = 30


def _attached(cluster: EmulatedCluster) -> int:
    return sum(
        bool((va.get("status") or {}).get("attached"))
        for va in cluster.objects("volumeattachments")
    )


async def test_a_restart_mid_attach_and_mid_detach_publishes_each_once(
    cluster: EmulatedCluster,
    operator: OperatorThread,
    driver: Driver,
    calls: Calls,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Attaches and detaches through a restart each: every VolumeAttachment attached, then
    gone, with exactly one ControllerPublish and one ControllerUnpublish each (a publish whose
    status write met the outage is written, not published again), and no attach or detach
    error in any status."""
    cluster.write_latency = 0.005
    await make_storage_class(cluster, operator)
    for index in range(ATTACHED):
        make_claim(cluster, f"a{index:03}")
    await until(lambda: _bound(cluster) == ATTACHED, timeout=30)
    with structlog.testing.capture_logs() as logs:
        await _through_a_restart(
            cluster, ATTACHED, lambda i: make_pod(cluster, f"p{i:03}", f"a{i:03}")
        )
        await until(lambda: _attached(cluster) == ATTACHED, timeout=CONVERGE)
        errors = [
            va["status"]
            for va in cluster.objects("volumeattachments")
            if "attachError" in va.get("status", {}) or "detachError" in va.get("status", {})
        ]
        assert not errors, errors
        assert calls.count("ControllerPublishVolume") == ATTACHED

        await _through_a_restart(
            cluster, ATTACHED, lambda i: cluster.delete("pods", NAMESPACE, f"p{i:03}")
        )
        await until(lambda: not cluster.objects("volumeattachments"), timeout=CONVERGE)
    assert calls.count("ControllerUnpublishVolume") == ATTACHED
    noise = _noise(logs)
    assert not noise, sorted({(e["event"], str(e.get("error"))[:150]) for e in noise})
    loud = [(r.name, r.getMessage()[:100]) for r in caplog.records if r.levelno >= logging.WARNING]
    assert not loud, loud
