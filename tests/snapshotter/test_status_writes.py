"""A snapshot content's status write that loses a race, end to end.

The two content controllers write their status the same way: read the content from the API,
fill in the status, and write it guarded by the resourceVersion it was computed from. We test
this aspect for a VolumeSnapshotContent (the group's is in test_groups.py): someone wrote the
content between our read and our write (409, or the real server's 422 for a failed `test`):
read again and write again at once; no Warning event, no error in the status, and no second
CreateSnapshot for a snapshot the driver already cut.
"""

from __future__ import annotations

import pytest

from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.operator import OperatorThread
from kopf_csi.testing.snapshots import SnapshotController
from kopf_csi.testing.spies import Calls

from ..provisioner.conftest import events_for
from .conftest import make_class, make_snapshot, ready_content, source_claim


@pytest.mark.parametrize("code", [409, 422])
async def test_a_lost_status_write_is_retried_quietly(
    cluster: EmulatedCluster,
    operator: OperatorThread,
    snapshots: SnapshotController,
    calls: Calls,
    kcm: object,
    code: int,
) -> None:
    await source_claim(cluster, operator)
    make_class(cluster)
    # The operator's first status write of a content is the one that loses its race (the
    # stand-in writes through the Python API, which faults skip).
    if code == 409:
        cluster.faults.add(
            409, verb="patch", resource="volumesnapshotcontents", subresource="status"
        )
    else:
        cluster.faults.lose_race("volumesnapshotcontents", subresource="status")
    snap = make_snapshot(cluster)
    found = await ready_content(cluster, snap)
    assert len(cluster.faults) == 0  # the injected lost race was met
    assert calls.count("CreateSnapshot") == 1
    assert [e for e in events_for(cluster, found) if e["type"] == "Warning"] == []
    assert "error" not in found["status"]
