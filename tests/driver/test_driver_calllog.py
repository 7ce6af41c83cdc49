"""The driver's call log: what each volume-changing call did, for suites that count duplicates.

We test these aspects:
- CreateVolume records `created` for a new volume and `existing` for a repeat of its name;
- DeleteVolume records `deleted`, then `absent` on a repeat; a refused delete records nothing;
- ControllerPublish records `published` then `already`; Unpublish `unpublished`,
  `not_published` and `absent`;
- calls failed by injected faults record nothing;
- the log spans a driver restart, subscribers see each record as it lands, and the JSON-lines
  file reads back the same records (also from the command line's `--call-log`).
"""

from __future__ import annotations

import pathlib

from driver_helpers import NODE, create, mount, raises

from kopf_csi.csi._generated.csi import v1 as csi
from kopf_csi.csi.codes import Code
from kopf_csi.driver import CallLog, CallRecord, Driver, DriverConfig
from kopf_csi.driver.__main__ import parse_args
from kopf_csi.driver.calllog import read_jsonl


def _publish(volume_id: str) -> csi.ControllerPublishVolumeRequest:
    return csi.ControllerPublishVolumeRequest(
        volume_id=volume_id, node_id=NODE, volume_capability=mount()
    )


def _unpublish(volume_id: str, node_id: str = NODE) -> csi.ControllerUnpublishVolumeRequest:
    return csi.ControllerUnpublishVolumeRequest(volume_id=volume_id, node_id=node_id)


def _outcomes(calls: CallLog) -> list[tuple[str, str]]:
    return [(r.method, r.outcome) for r in calls.records]


async def test_every_effect_is_recorded_once(
    driver_config: DriverConfig, socket_path: pathlib.Path, controller: csi.ControllerStub
) -> None:
    calls = CallLog(path=socket_path.parent / "calls.jsonl")
    seen: list[CallRecord] = []
    calls.subscribe(seen.append)
    driver = Driver(driver_config, socket_path=socket_path, calls=calls)
    await driver.start()
    try:
        volume = await create(controller, "pvc-a")
        again = await create(controller, "pvc-a")
        assert again.volume_id == volume.volume_id
        await controller.controller_publish_volume(_publish(volume.volume_id))
        await controller.controller_publish_volume(_publish(volume.volume_id))
        with raises(Code.FAILED_PRECONDITION):  # published: refused, and nothing recorded
            await controller.delete_volume(csi.DeleteVolumeRequest(volume_id=volume.volume_id))
        await driver.restart()  # the log belongs to the Driver: it spans restarts
        await controller.controller_unpublish_volume(_unpublish(volume.volume_id))
        await controller.controller_unpublish_volume(_unpublish(volume.volume_id))
        await controller.delete_volume(csi.DeleteVolumeRequest(volume_id=volume.volume_id))
        await controller.delete_volume(csi.DeleteVolumeRequest(volume_id=volume.volume_id))
        await controller.controller_unpublish_volume(_unpublish(volume.volume_id))
        driver.faults.fail("CreateVolume", Code.UNAVAILABLE, times=1)
        with raises(Code.UNAVAILABLE):
            await create(controller, "pvc-b")
    finally:
        await driver.stop(grace=0.1)

    assert _outcomes(calls) == [
        ("CreateVolume", "created"),
        ("CreateVolume", "existing"),
        ("ControllerPublishVolume", "published"),
        ("ControllerPublishVolume", "already"),
        ("ControllerUnpublishVolume", "unpublished"),
        ("ControllerUnpublishVolume", "not_published"),
        ("DeleteVolume", "deleted"),
        ("DeleteVolume", "absent"),
        ("ControllerUnpublishVolume", "absent"),
    ]
    assert {r.volume_id for r in calls.records} == {volume.volume_id}
    assert [r.name for r in calls.records[:2]] == ["pvc-a", "pvc-a"]
    assert calls.records[2].node_id == NODE
    assert calls.count("CreateVolume", "created") == 1
    assert seen == calls.records
    assert read_jsonl(socket_path.parent / "calls.jsonl") == calls.records


def test_the_command_line_takes_a_call_log_path(tmp_path: pathlib.Path) -> None:
    argv = ["--endpoint", f"unix://{tmp_path}/csi.sock", "--node-id", NODE]
    argv += ["--data-dir", str(tmp_path), "--call-log", str(tmp_path / "calls.jsonl")]
    _, _, args = parse_args(argv)
    assert args.call_log == tmp_path / "calls.jsonl"
