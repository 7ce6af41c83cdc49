"""A back end registered after start-up serves the claims that exist already: the watch
passed them on before it was there, so it lists them once (they would wait for their next
change otherwise, for ever if nothing changes them)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest

from kopf_csi.settings import CSISettings, Settings
from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.operator import DEFAULT_MODULES, running_operator
from tests.backends import late_backend, state
from tests.backends.memory_backend import NAME

from ..conftest import until


@pytest.fixture(autouse=True)
def clean() -> Iterator[None]:
    state.reset()
    late_backend.REGISTER.clear()
    yield
    late_backend.REGISTER.set()  # never leave the operator's task waiting
    state.reset()


async def test_a_back_end_registered_late_provisions_the_claims_already_there(
    cluster: EmulatedCluster, kcm: Any, settings: Settings
) -> None:
    cluster.create(
        "storageclasses",
        {"metadata": {"name": "mem"}, "provisioner": NAME, "volumeBindingMode": "Immediate"},
    )
    claim = cluster.create(
        "persistentvolumeclaims",
        {"metadata": {"name": "early"}, "spec": {"storageClassName": "mem",
         "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Mi"}}}},
        namespace="default",
    )  # fmt: skip
    volume = f"pvc-{claim['metadata']['uid']}"
    settings = dataclasses.replace(settings, csi=CSISettings(disabled=True))
    modules = (*DEFAULT_MODULES, "tests.backends.late_backend")
    async with running_operator(settings=settings, modules=modules):
        await until(lambda: cluster.requests.count(verb="watch", resource="persistentvolumeclaims"))
        assert cluster.get("persistentvolumes", None, volume) is None  # nobody serves it yet
        late_backend.REGISTER.set()
        await until(lambda: cluster.get("persistentvolumes", None, volume), timeout=10)
    assert {volume: 1} == state.MADE
