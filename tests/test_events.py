"""The event recorder: client-go's aggregation of repeats, and failures that lose nothing.

We test these aspects:
- an event is posted with the object reference, type, reason, message and source;
- the same event again within the window bumps `count` on the first one instead of a new one;
- an API that refuses events is logged, never raised, and the next post works again.
"""

from __future__ import annotations

import pathlib
from typing import Any

import structlog

from kopf_csi import events, kube
from kopf_csi.testing.emulator import EmulatedCluster

CLAIM: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "PersistentVolumeClaim",
    "metadata": {"name": "data", "namespace": "default", "uid": "u-1", "resourceVersion": "7"},
}


async def test_repeats_are_aggregated(cluster: EmulatedCluster, kubeconfig: pathlib.Path) -> None:
    async with await kube.KubeClient.connect(kubeconfig) as api:
        recorder = events.Recorder(api, component="test")
        for _ in range(3):
            await recorder.post(CLAIM, type_=events.WARNING, reason="R", message="m")
        await recorder.post(CLAIM, type_=events.NORMAL, reason="Other", message="m")
    posted = {e["reason"]: e for e in cluster.objects("events", namespace="default")}
    assert set(posted) == {"R", "Other"}
    assert posted["R"]["count"] == 3
    assert posted["R"]["type"] == "Warning"
    assert posted["R"]["involvedObject"]["uid"] == "u-1"
    assert posted["R"]["involvedObject"]["kind"] == "PersistentVolumeClaim"
    assert posted["R"]["source"]["component"] == "test"
    assert posted["Other"]["count"] == 1


async def test_a_refused_event_is_logged_not_raised(
    cluster: EmulatedCluster, kubeconfig: pathlib.Path
) -> None:
    async with await kube.KubeClient.connect(kubeconfig) as api:
        recorder = events.Recorder(api, component="test")
        fault = cluster.faults.add(503, verb="create", resource="events", times=1)
        with structlog.testing.capture_logs() as logs:
            await recorder.post(CLAIM, type_=events.WARNING, reason="R", message="m")
        assert [e["event"] for e in logs] == ["event_not_posted"]
        assert cluster.objects("events", namespace="default") == []
        cluster.faults.remove(fault)
        await recorder.post(CLAIM, type_=events.WARNING, reason="R", message="m")
    [posted] = cluster.objects("events", namespace="default")
    assert posted["count"] == 1


async def test_an_unreachable_api_loses_the_event_only(
    tmp_path: pathlib.Path, unused_tcp_port: int
) -> None:
    """Events are best effort: a refused connection is logged, and the caller carries on."""
    gone = EmulatedCluster(port=unused_tcp_port)  # never started: nothing listens there
    kubeconfig = gone.write_kubeconfig(tmp_path / "gone.json")
    async with await kube.KubeClient.connect(kubeconfig) as api:
        recorder = events.Recorder(api, component="test")
        with structlog.testing.capture_logs() as logs:
            await recorder.post(CLAIM, type_=events.WARNING, reason="R", message="m")
    assert [e["event"] for e in logs] == ["event_not_posted"]
