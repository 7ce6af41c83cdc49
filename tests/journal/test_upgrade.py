"""A rolling update from the previous release's journal to this one loses nothing.

The previous release kept its in-flight claims in one ConfigMap (`kopf-csi-inflight-<driver>`,
today's first lane), each record the bare claim snapshot, without a format version (`git show
dcf2338:src/kopf_csi/provisioning/journal.py`; unchanged until the lanes came). We test these
aspects:
- this release writes format 2 (the snapshot with `"journalFormat": 2`) and reads format 1,
  format 2, and refuses (leaves alone) a newer format or a record that is no object;
- the upgrade: records written as the previous release wrote them, for claims whose
  CreateVolume was in flight when its pod was killed (one deleted meanwhile, its volume made
  on the driver after all; one deleted before the call reached the driver; one still
  waiting), then this release starts: every claim is finished, the journal's lanes end empty,
  and the driver holds no volume without a claim: 0 leaked;
- a record of a newer release's format is left in its lane, untouched, with a warning.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest
from structlog.testing import capture_logs

from kopf_csi import rbac
from kopf_csi.csi import CSIClient
from kopf_csi.driver import Driver
from kopf_csi.provisioning.journal import (
    FORMAT,
    NewerFormatError,
    decode,
    encode,
    journal_name,
    lane_names,
    snapshot_of,
)
from kopf_csi.settings import Settings
from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.kcm import ControllerManager
from kopf_csi.testing.operator import OperatorThread

from ..conftest import DRIVER_NAME, until
from .test_inflight_restart import _claim, _seed, create_volume_request

OWN = rbac.NAMESPACE  # the operator's namespace: its journal's (kit_rbac)
JOURNAL = journal_name(DRIVER_NAME)


def previous_release_record(claim: dict[str, Any]) -> str:
    """A record exactly as the previous release wrote it (its snapshot_of and json.dumps)."""
    meta = claim.get("metadata", {})
    snapshot = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            key: meta[key]
            for key in ("name", "namespace", "uid", "annotations", "labels")
            if key in meta
        },
        "spec": claim.get("spec", {}),
    }
    return json.dumps(snapshot, separators=(",", ":"), sort_keys=True)


def test_this_release_writes_format_2_and_reads_1_and_2() -> None:
    claim = _claim("data") | {"metadata": {"name": "data", "namespace": "default", "uid": "u1"}}
    written = json.loads(encode(claim))
    assert written["journalFormat"] == FORMAT == 2
    assert decode(encode(claim)) == snapshot_of(claim)
    assert decode(previous_release_record(claim)) == snapshot_of(claim)


def test_a_record_is_the_standard_librarys_compact_sorted_json() -> None:
    """orjson writes the records now: the same text as the standard library's for ASCII (what
    earlier releases wrote), UTF-8 rather than escapes beyond it, and the same values back for
    every release's reader (`json.loads`); what orjson refuses still gets written."""
    claim = _claim("data") | {"metadata": {"name": "data", "namespace": "default", "uid": "u1",
                                           "annotations": {"z": "1", "a": "x"}}}  # fmt: skip
    record = {**snapshot_of(claim), "journalFormat": 2}
    assert encode(claim) == json.dumps(record, separators=(",", ":"), sort_keys=True)
    claim["metadata"]["annotations"]["note"] = "données ✓"
    assert json.loads(encode(claim))["metadata"]["annotations"]["note"] == "données ✓"
    claim["metadata"]["annotations"]["big"] = 2**70  # beyond orjson's integers
    assert decode(encode(claim))["metadata"]["annotations"]["big"] == 2**70


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        ('{"journalFormat":3,"metadata":{}}', NewerFormatError),
        ('{"journalFormat":"2"}', ValueError),
        ("[1, 2]", ValueError),
        ("not json", ValueError),
    ],
)
def test_what_this_release_does_not_read(raw: str, error: type[Exception]) -> None:
    with pytest.raises(error):
        decode(raw)


def _lanes(cluster: EmulatedCluster) -> dict[str, dict[str, str]]:
    found = {}
    for name in lane_names(JOURNAL):
        config_map = cluster.get("configmaps", OWN, name)
        if config_map is not None:
            found[name] = dict(config_map.get("data") or {})
    return found


async def test_the_previous_releases_journal_is_finished_after_the_upgrade(
    cluster: EmulatedCluster,
    kcm: ControllerManager,
    driver: Driver,
    settings: Settings,
    socket_path: pathlib.Path,
) -> None:
    _seed(cluster)
    claims = {}
    for name in ("made-then-deleted", "deleted-before-the-call", "still-waiting"):
        created = cluster.create("persistentvolumeclaims", _claim(name), namespace="default")
        claims[name] = await until(
            lambda name=name: (
                (cluster.get("persistentvolumeclaims", "default", name) or {})
                .get("metadata", {})
                .get("annotations", {})
                .get("volume.kubernetes.io/storage-provisioner")
                and cluster.get("persistentvolumeclaims", "default", name)
            )
        )
        assert claims[name]["metadata"]["uid"] == created["metadata"]["uid"]
    # The old pod's journal, one ConfigMap, as it was when the pod was killed.
    cluster.create(
        "configmaps",
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": JOURNAL, "namespace": OWN},
            "data": {c["metadata"]["uid"]: previous_release_record(c) for c in claims.values()},
        },
        namespace=OWN,
    )
    # Its CreateVolume for the first claim reached the driver; the user then gave up on two.
    made = claims["made-then-deleted"]["metadata"]["uid"]
    async with CSIClient(str(socket_path)) as client:
        await client.create_volume(create_volume_request(f"pvc-{made}"))
    cluster.delete("persistentvolumeclaims", "default", "made-then-deleted")
    cluster.delete("persistentvolumeclaims", "default", "deleted-before-the-call")

    operator = OperatorThread(settings=settings)  # this release
    await operator.start()
    try:

        def finished() -> bool:
            waiting = cluster.get("persistentvolumeclaims", "default", "still-waiting") or {}
            bound = waiting.get("status", {}).get("phase") == "Bound"
            return bound and not any(_lanes(cluster).values())

        await until(finished, timeout=20)
        volume = cluster.get("persistentvolumeclaims", "default", "still-waiting")["spec"][
            "volumeName"
        ]
        await until(lambda: len(driver.state.volumes) == 1, timeout=20)
        await until(lambda: len(cluster.objects("persistentvolumes")) == 1, timeout=20)
    finally:
        await operator.stop()
    assert [pv["metadata"]["name"] for pv in cluster.objects("persistentvolumes")] == [volume]
    assert [v.name for v in driver.state.volumes.values()] == [volume]  # 0 leaked


async def test_a_newer_releases_record_is_left_alone(
    cluster: EmulatedCluster, kcm: ControllerManager, driver: Driver, settings: Settings
) -> None:
    _seed(cluster)
    newer = json.dumps({"journalFormat": FORMAT + 1, "claim": {"whatever": "it holds"}})
    lane = lane_names(JOURNAL)[1]
    cluster.create(
        "configmaps",
        {"apiVersion": "v1", "kind": "ConfigMap",
         "metadata": {"name": lane, "namespace": OWN}, "data": {"u-future": newer}},
        namespace=OWN,
    )  # fmt: skip
    operator = OperatorThread(settings=settings)
    with capture_logs() as logs:
        await operator.start()
        try:
            cluster.create("persistentvolumeclaims", _claim("data"), namespace="default")
            await until(
                lambda: (
                    (cluster.get("persistentvolumeclaims", "default", "data") or {})
                    .get("status", {})
                    .get("phase")
                    == "Bound"
                )
            )
        finally:
            await operator.stop()
    assert _lanes(cluster)[lane]["u-future"] == newer
    assert any(entry["event"] == "journal_entry_newer_format" for entry in logs)
