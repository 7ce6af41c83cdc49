"""The emulator's public names stay where users and tests import them from (`emulator`), though
they live in the emulator's parts (kinds, store, watches, serving, faults)."""

from __future__ import annotations

import pytest

from kopf_csi.testing import emulator, faults, kinds, serving, store, watches


@pytest.mark.parametrize("name", emulator.__all__)
def test_every_public_name_is_importable_from_the_emulator(name: str) -> None:
    assert getattr(emulator, name) is not None


@pytest.mark.parametrize(
    ("name", "part"),
    [("Kind", kinds), ("KINDS", kinds), ("Body", kinds), ("Faults", faults), ("Fault", faults),
     ("OTHER_WRITER", faults), ("Change", watches), ("Subscription", watches),
     ("TEST_MANAGER", store), ("PROTECTION_FINALIZERS", store)],
)  # fmt: skip
def test_a_public_name_is_its_part_s_own(name: str, part: object) -> None:
    assert getattr(emulator, name) is getattr(part, name)


def test_the_cluster_is_the_store_served_over_http() -> None:
    assert issubclass(emulator.EmulatedCluster, serving.HttpServing)
    assert issubclass(emulator.EmulatedCluster, store.ObjectStore)
    cluster = emulator.EmulatedCluster()
    assert {kind.plural for kind in emulator.KINDS} <= {k.plural for k in cluster._store}
    assert cluster.resource_version == 0
