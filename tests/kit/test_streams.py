"""A user's module on the operator's own claim and PV streams (`kopf_csi.on`), end to end.

Under the kit's operator, with the default modules: each event reaches the module's handlers
once; no watch is opened beside the operator's own (the emulator counts the watch requests;
the same wish through `@kopf.on.create` opens a second one, and annotates every PV); nothing is
written onto the PVs; a failing handler is logged with its object and stops nothing.
"""

from __future__ import annotations

import collections
import re
from typing import Any

import pytest

from kopf_csi.driver import Driver
from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.kcm import ControllerManager
from kopf_csi.testing.operator import DEFAULT_MODULES, OperatorThread
from kopf_csi.testing.pytest_plugin import DRIVER_NAME, NODE, until

USER = "tests.kit.user_streams"
PLAIN = "tests.kit.plain_kopf"


@pytest.fixture
def cluster_nodes() -> tuple[str, ...]:
    return (NODE,)


@pytest.fixture
def handler_modules(request: pytest.FixtureRequest) -> tuple[str, ...]:
    return (*DEFAULT_MODULES, getattr(request, "param", USER))


def make_class(cluster: EmulatedCluster) -> None:
    cluster.create(
        "storageclasses",
        {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "fast"},
         "provisioner": DRIVER_NAME, "reclaimPolicy": "Delete", "volumeBindingMode": "Immediate"},
    )  # fmt: skip


def make_claim(cluster: EmulatedCluster, name: str) -> None:
    cluster.create(
        "persistentvolumeclaims",
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
         "metadata": {"name": name, "namespace": "default"},
         "spec": {"storageClassName": "fast", "accessModes": ["ReadWriteOnce"],
                  "resources": {"requests": {"storage": "1Mi"}}}},
    )  # fmt: skip


def volume_of(cluster: EmulatedCluster, claim: str) -> str | None:
    body = cluster.get("persistentvolumeclaims", "default", claim) or {}
    return body.get("spec", {}).get("volumeName")


def watches(cluster: EmulatedCluster) -> dict[str, int]:
    return {
        plural: cluster.requests.count(verb="watch", resource=plural)
        for plural in ("persistentvolumes", "persistentvolumeclaims")
    }


def kopf_annotations(obj: dict[str, Any]) -> list[str]:
    annotations = obj["metadata"].get("annotations") or {}
    return [key for key in annotations if key.startswith("kopf-csi.kopf.dev/")]


async def idle(operator: OperatorThread) -> None:
    await until(lambda: operator.memo.streams.pending == 0)


async def test_each_event_once_on_the_operators_own_watches(
    cluster: EmulatedCluster, kcm: ControllerManager, driver: Driver, operator: OperatorThread,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    make_class(cluster)
    cluster.create(  # by hand: not provisioned, but deleted like any PV
        "persistentvolumes",
        {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "handmade"},
         "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                  "persistentVolumeReclaimPolicy": "Retain",
                  "csi": {"driver": DRIVER_NAME, "volumeHandle": "handmade"}}},
    )  # fmt: skip
    make_claim(cluster, "data")
    volume = await until(lambda: volume_of(cluster, "data"), timeout=30)
    seen: list[tuple[Any, ...]] = operator.memo.seen
    await until(lambda: ("provisioned", volume, "data") in seen)
    pv = cluster.get("persistentvolumes", None, volume)
    assert pv is not None
    assert kopf_annotations(pv) == []
    assert kopf_annotations(cluster.get("persistentvolumes", None, "handmade") or {}) == []

    cluster.delete("persistentvolumeclaims", "default", "data")
    await until(lambda: ("deleted", volume) in seen, timeout=30)
    cluster.delete("persistentvolumes", None, "handmade")
    await until(lambda: ("deleted", "handmade") in seen)
    await idle(operator)

    counts = collections.Counter(entry for entry in seen if entry[0] != "claim")
    assert counts == {
        ("provisioned", volume, "data"): 1,
        ("released", volume): 1,
        ("deleted", volume): 1,
        ("deleted", "handmade"): 1,
    }
    claim_events = [entry[1] for entry in seen if entry[:1] == ("claim",)]
    assert claim_events[0] == "ADDED"
    assert claim_events[-1] == "DELETED"
    assert claim_events.count("ADDED") == 1
    assert claim_events.count("DELETED") == 1
    # The operator's own watches, one of each kind, and no other.
    assert watches(cluster) == {"persistentvolumes": 1, "persistentvolumeclaims": 1}
    out = capsys.readouterr().out  # the operator's log (structlog's default: stdout)
    # The record's own line (a traceback follows it, rendered by rich where it is installed).
    failures = [line for line in out.splitlines() if re.search(r"\] stream_handler_failed ", line)]
    assert len(failures) == 1, out[-3000:]
    assert "user.failing" in failures[0]
    assert f"a bug in the user's handler for {volume}" in failures[0]
    assert "user_saw_provisioned" in out


@pytest.mark.parametrize("handler_modules", [PLAIN], indirect=True)
async def test_plain_kopf_watches_again_and_annotates(
    cluster: EmulatedCluster, kcm: ControllerManager, driver: Driver, operator: OperatorThread
) -> None:
    """The control: what the counters and annotations above would show for plain kopf."""
    make_class(cluster)
    make_claim(cluster, "data")
    volume = await until(lambda: volume_of(cluster, "data"), timeout=30)
    await until(lambda: kopf_annotations(cluster.get("persistentvolumes", None, volume) or {}))
    assert watches(cluster)["persistentvolumes"] == 2


@pytest.mark.parametrize("handler_modules", ["tests.kit.stuck_streams"], indirect=True)
async def test_a_stuck_handler_holds_up_only_itself(
    cluster: EmulatedCluster, kcm: ControllerManager, driver: Driver, operator: OperatorThread
) -> None:
    """The operator provisions and deletes, the other handler sees the deletion, and the
    operator stops (the operator fixture's teardown), while one handler never returns."""
    make_class(cluster)
    make_claim(cluster, "data")
    volume = await until(lambda: volume_of(cluster, "data"), timeout=30)
    cluster.delete("persistentvolumeclaims", "default", "data")
    await until(lambda: volume in operator.memo.get("deleted", []), timeout=30)
    assert not driver.state.volumes
    assert operator.memo.streams.pending > 0  # the stuck one's events wait for it
