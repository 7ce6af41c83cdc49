"""Required secrets, and secrets never logged.

We test these aspects:
- an RPC that requires secrets is UNAUTHENTICATED without them or with wrong ones, and works
  with the right ones; RPCs that do not require them do not care;
- across a whole lifecycle with secrets on every request, and with failures, no log record and
  no error message contains a secret value.
"""

from __future__ import annotations

import pathlib

import structlog
from driver_helpers import NODE, Start, create, mount, raises
from grpclib.exceptions import GRPCError

from kopf_csi.csi._generated.csi import v1 as csi
from kopf_csi.csi.codes import Code
from kopf_csi.driver import SecretsPolicy, secrets

SECRET = "hunter2-very-secret"


async def test_required_secrets(start: Start, controller: csi.ControllerStub) -> None:
    policy = SecretsPolicy(
        required_for=secrets.parse_operations("create"), expected={"password": SECRET}
    )
    await start(secrets=policy)
    with raises(Code.UNAUTHENTICATED):
        await create(controller)
    with raises(Code.UNAUTHENTICATED):
        await create(controller, secrets={"password": "wrong"})
    volume = await create(controller, secrets={"password": SECRET, "user": "admin"})
    await controller.delete_volume(csi.DeleteVolumeRequest(volume_id=volume.volume_id))


async def test_secrets_are_never_logged(
    start: Start, controller: csi.ControllerStub, node: csi.NodeStub, tmp_path: pathlib.Path
) -> None:
    policy = SecretsPolicy(required_for=secrets.SECRET_BEARING, expected={"password": SECRET})
    await start(secrets=policy)
    given = {"password": SECRET}
    errors: list[str] = []
    with structlog.testing.capture_logs() as logs:
        try:
            await create(controller, secrets={"password": SECRET + "-wrong"})
        except GRPCError as exc:
            errors.append(exc.message or "")
        volume = await create(controller, secrets=given)
        vid = volume.volume_id
        await controller.controller_publish_volume(
            csi.ControllerPublishVolumeRequest(
                volume_id=vid, node_id=NODE, volume_capability=mount(), secrets=given
            )
        )
        await node.node_stage_volume(
            csi.NodeStageVolumeRequest(
                volume_id=vid,
                staging_target_path=str(tmp_path / "s"),
                volume_capability=mount(),
                secrets=given,
            )
        )
        await node.node_publish_volume(
            csi.NodePublishVolumeRequest(
                volume_id=vid,
                target_path=str(tmp_path / "t"),
                staging_target_path=str(tmp_path / "s"),
                volume_capability=mount(),
                secrets=given,
            )
        )
        await controller.create_snapshot(
            csi.CreateSnapshotRequest(name="s", source_volume_id=vid, secrets=given)
        )
        try:
            await controller.delete_volume(csi.DeleteVolumeRequest(volume_id=vid, secrets=given))
        except GRPCError as exc:  # still published: FAILED_PRECONDITION, with a message
            errors.append(exc.message or "")
    assert len(errors) == 2
    assert logs, "the calls were logged"
    for text in [*map(str, logs), *errors]:
        assert SECRET not in text
