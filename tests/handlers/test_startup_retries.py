"""Start-up survives API errors (both found by the chaos suite).

We test these aspects:
- a LIST that fails at start-up (5xx) is retried within a second, not after kopf's one-minute
  retry of a failed start-up handler: the operator is ready and provisions a claim at once;
- objects stored by a failed attempt (or a pass the pager started over) that the complete
  LIST no longer has are dropped again, and the complete LIST's resourceVersion is returned;
- reading the in-flight journal at start-up (5xx) is retried the same way, and the provisioner
  starts once (a failed start-up handler would be re-run over the queues it started);
- each journal record's claim is read with its own retries: one 5xx among hundreds of reads
  does not restart the resume from the first record (it never finished under chaos).
"""

from __future__ import annotations

import time
import types
from collections.abc import AsyncIterator
from typing import Any

import pytest

from kopf_csi import kube
from kopf_csi.caches import Cache
from kopf_csi.driver import Driver
from kopf_csi.provisioning.operations import Provisioner
from kopf_csi.settings import Settings
from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.kcm import ControllerManager
from kopf_csi.testing.operator import running_operator
from kopf_csi_handlers.lifecycle import _prime_kind

from ..conftest import DRIVER_NAME, seed_node, until


@pytest.mark.parametrize(
    ("verb", "resource"),
    [
        pytest.param("list", "persistentvolumes", id="priming-the-caches"),
        pytest.param("get", "configmaps", id="reading-the-journal"),
    ],
)
async def test_a_failed_read_at_startup_is_retried_at_once(
    verb: str,
    resource: str,
    cluster: EmulatedCluster,
    kcm: ControllerManager,
    driver: Driver,
    settings: Settings,
    handler_modules: tuple[str, ...],
) -> None:
    cluster.create("storageclasses", {"metadata": {"name": "fast"}, "provisioner": DRIVER_NAME,
                                      "volumeBindingMode": "Immediate"})  # fmt: skip
    seed_node(cluster)
    cluster.faults.add(503, verb=verb, resource=resource, times=3)
    started = time.monotonic()
    async with running_operator(settings=settings, modules=handler_modules) as operator:
        await until(lambda: getattr(operator.memo, "driver", None) is not None, timeout=20)
        assert time.monotonic() - started < 20  # kopf alone would retry after 60 s
        assert len(cluster.faults) == 0  # the three failures were served, then retried
        claim = {
            "metadata": {"name": "data", "namespace": "default"},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": "fast",
                "resources": {"requests": {"storage": "1Mi"}},
            },
        }
        cluster.create("persistentvolumeclaims", claim)
        await until(
            lambda: (
                (cluster.get("persistentvolumeclaims", "default", "data") or {})
                .get("status", {})
                .get("phase")
                == "Bound"
            ),
            timeout=20,
        )


class _FlakyAPI:
    """Attempt 1: a page with a and b, then an error; attempt 2: a and c."""

    def __init__(self) -> None:
        self.attempts = 0

    async def pages(
        self, resource: kube.Resource, *, versions: list[str]
    ) -> AsyncIterator[list[dict[str, Any]]]:
        self.attempts += 1
        versions.append(f"v{self.attempts}")
        if self.attempts == 1:
            yield [{"metadata": {"name": "a"}}, {"metadata": {"name": "b"}}]
            raise kube.KubeError("etcd timeout", status=504)
        yield [{"metadata": {"name": "a"}}, {"metadata": {"name": "c"}}]


class _RestartingPager:
    """One list whose continue token expired after the first page: the pager starts over."""

    async def pages(
        self, resource: kube.Resource, *, versions: list[str]
    ) -> AsyncIterator[list[dict[str, Any]]]:
        versions.append("v1")
        yield [{"metadata": {"name": "a"}}, {"metadata": {"name": "b"}}]
        versions.append("v2")  # b was deleted before the list started over
        yield [{"metadata": {"name": "a"}}]
        yield [{"metadata": {"name": "c"}}]


async def test_objects_only_a_failed_attempt_saw_are_dropped() -> None:
    api, cache = _FlakyAPI(), Cache()
    version = await _prime_kind(api, kube.VOLUMES, cache, delay=0.01)  # type: ignore[arg-type]
    assert api.attempts == 2
    assert sorted(obj["metadata"]["name"] for obj in cache) == ["a", "c"]
    assert version == "v2"  # the complete list's: the PV informer watches on from there


async def test_objects_only_a_restarted_pass_saw_are_dropped() -> None:
    cache = Cache()
    version = await _prime_kind(_RestartingPager(), kube.VOLUMES, cache)  # type: ignore[arg-type]
    assert sorted(obj["metadata"]["name"] for obj in cache) == ["a", "c"]
    assert version == "v2"


class _FlakyReads:
    """GET answers 503 twice, then the claim; a 403 is not retried."""

    def __init__(self, status: int = 503) -> None:
        self.calls = 0
        self.status = status

    async def get(self, resource: kube.Resource, name: str, namespace: str | None) -> Any:
        self.calls += 1
        if self.calls <= 2:
            raise kube.KubeError("chaos", status=self.status)
        return {"metadata": {"name": name, "namespace": namespace, "uid": "u1"}}


async def test_each_journal_read_is_retried_alone() -> None:
    """A 5xx on one record's GET retries that GET, not the whole resume from its first record."""
    api = _FlakyReads()
    owner = types.SimpleNamespace(api=api)
    claim = await Provisioner._read(owner, kube.CLAIMS, "default/data", "data", "default")  # type: ignore[arg-type]
    assert claim is not None
    assert claim["metadata"]["uid"] == "u1"
    assert api.calls == 3

    forbidden = _FlakyReads(status=403)
    owner = types.SimpleNamespace(api=forbidden)
    with pytest.raises(kube.KubeError):
        await Provisioner._read(owner, kube.CLAIMS, "default/data", "data", "default")  # type: ignore[arg-type]
    assert forbidden.calls == 1
