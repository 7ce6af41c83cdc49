"""The finalizers protecting clone and snapshot sources while volumes are made from them.

We test these aspects:
- adding and removing finalizers: idempotent, every copy removed, None when unchanged;
- the cloning-protection finalizer: set before cloning, released from a deleted source only
  when no Pending claim in its namespace still clones it (with Go's blocking message);
- the snapshot-source finalizer: set before restoring, removed after, and swept from snapshots
  that no pending (or phase-less) claim restores, via dataSource or dataSourceRef.
"""

from __future__ import annotations

from typing import Any

import pytest

from kopf_csi.provisioning import protection

from .factories import make_claim

CLONING = "provisioner.storage.kubernetes.io/cloning-protection"
SNAP_FIN = "provisioner.storage.kubernetes.io/volumesnapshot-as-source-protection"
GROUP = "snapshot.storage.k8s.io"


@pytest.mark.parametrize(
    ("finalizers", "added", "removed"),
    [
        pytest.param([], ["f"], None, id="absent -> added, nothing to remove"),
        pytest.param(["a", "f"], None, ["a"], id="present -> not re-added, removed"),
        pytest.param(["f", "a", "f"], None, ["a"], id="twice -> every copy removed"),
    ],
)
def test_add_and_remove(
    finalizers: list[str], added: list[str] | None, removed: list[str] | None
) -> None:
    assert protection.add_finalizer(finalizers, "f") == added
    assert protection.remove_finalizer(finalizers, "f") == removed


SOURCE = make_claim(
    name="src",
    metadata={"finalizers": ["kubernetes.io/pvc-protection", CLONING], "deletionTimestamp": "t"},
)


def cloner(
    name: str, phase: str, namespace: str = "default", source: str = "src"
) -> dict[str, Any]:
    spec = {"dataSource": {"kind": "PersistentVolumeClaim", "name": source}}
    return make_claim(name=name, namespace=namespace, spec=spec, status={"phase": phase})


def test_protect_clone_source() -> None:
    assert protection.protect_clone_source(make_claim(name="src")) == [CLONING]
    assert protection.protect_clone_source(SOURCE) is None


@pytest.mark.parametrize(
    ("source", "claims", "expected", "blocker"),
    [
        pytest.param(
            SOURCE, [], ["kubernetes.io/pvc-protection"], None, id="deleted, no clones -> released"
        ),
        pytest.param(
            SOURCE,
            [cloner("c1", "Bound")],
            ["kubernetes.io/pvc-protection"],
            None,
            id="clone bound -> released",
        ),
        pytest.param(
            SOURCE,
            [cloner("c1", "Bound"), cloner("c2", "Pending")],
            None,
            "PVC 'c2' is in 'Pending' state, cloning in progress",
            id="clone pending -> kept",
        ),
        pytest.param(
            SOURCE,
            [cloner("c1", "Pending", namespace="other")],
            ["kubernetes.io/pvc-protection"],
            None,
            id="pending in other namespace -> released",
        ),
        pytest.param(
            SOURCE,
            [cloner("c1", "Pending", source="another")],
            ["kubernetes.io/pvc-protection"],
            None,
            id="pending clone of another -> released",
        ),
        pytest.param(
            make_claim(name="src", metadata={"finalizers": [CLONING]}),
            [],
            None,
            None,
            id="not deleted -> kept",
        ),
        pytest.param(
            make_claim(name="src", metadata={"deletionTimestamp": "t"}),
            [],
            None,
            None,
            id="no finalizer -> nothing to do",
        ),
    ],
)
def test_release_clone_source(
    source: dict[str, Any],
    claims: list[dict[str, Any]],
    expected: list[str] | None,
    blocker: str | None,
) -> None:
    assert protection.release_clone_source(source, claims=claims) == expected
    assert protection.clone_in_progress(source, claims=claims) == blocker


SNAPSHOT = {
    "metadata": {
        "name": "snap",
        "namespace": "default",
        "finalizers": ["snapshot.storage.kubernetes.io/volumesnapshot-bound-protection", SNAP_FIN],
    }
}


def test_protect_and_release_snapshot_source() -> None:
    assert protection.protect_snapshot_source({"metadata": {}}) == [SNAP_FIN]
    assert protection.protect_snapshot_source(SNAPSHOT) is None
    assert protection.release_snapshot_source(SNAPSHOT) == [
        "snapshot.storage.kubernetes.io/volumesnapshot-bound-protection"
    ]


def restorer(
    phase: str | None, *, ref: bool = False, group: str | None = GROUP, namespace: str | None = None
) -> dict[str, Any]:
    source: dict[str, Any] = {"kind": "VolumeSnapshot", "name": "snap"}
    if group is not None:
        source["apiGroup"] = group
    if namespace is not None:
        source["namespace"] = namespace
    claim = make_claim(
        spec={"dataSourceRef" if ref else "dataSource": source},
        status={"phase": phase} if phase else {"x": 1},
    )
    return claim


@pytest.mark.parametrize(
    ("claims", "expected"),
    [
        pytest.param([], set(), id="no claims -> none"),
        pytest.param([restorer("Pending")], {"default/snap"}, id="pending restore -> pending"),
        pytest.param([restorer(None)], {"default/snap"}, id="no phase yet -> pending"),
        pytest.param([restorer("Bound")], set(), id="bound restore -> not pending"),
        pytest.param(
            [restorer("Pending", group=None)],
            {"default/snap"},
            id="no api group -> still a snapshot",
        ),
        pytest.param(
            [restorer("Pending", group="other.io")], set(), id="other api group -> not a snapshot"
        ),
        pytest.param(
            [restorer("Pending", ref=True)], {"default/snap"}, id="dataSourceRef -> pending"
        ),
        pytest.param(
            [restorer("Pending", ref=True, namespace="src-ns")],
            {"src-ns/snap"},
            id="cross-namespace ref -> its namespace",
        ),
    ],
)
def test_pending_snapshot_keys(claims: list[dict[str, Any]], expected: set[str]) -> None:
    assert protection.pending_snapshot_keys(claims) == expected


@pytest.mark.parametrize(
    ("pending", "expected"),
    [
        pytest.param(
            set(),
            ["snapshot.storage.kubernetes.io/volumesnapshot-bound-protection"],
            id="orphaned -> released",
        ),
        pytest.param({"default/snap"}, None, id="still restored -> kept"),
    ],
)
def test_release_orphaned_snapshot(pending: set[str], expected: list[str] | None) -> None:
    assert protection.release_orphaned_snapshot(SNAPSHOT, pending=pending) == expected


def test_sweep_ignores_unprotected_snapshots() -> None:
    assert protection.release_orphaned_snapshot({"metadata": {"name": "s"}}, pending=set()) is None
