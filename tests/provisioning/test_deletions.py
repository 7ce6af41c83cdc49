"""The volume side: which PVs are ours, our finalizer, and when DeleteVolume may be called.

We test these aspects:
- ownership: `provisioned-by` (or `migrated-to`) naming us, or a static CSI PV of our driver;
- the PV finalizer: added to Bound Delete-policy PVs, removed for Retain and Recycle, left
  alone otherwise (deleting, not Bound, already there);
- DeleteVolume only for Released Delete-policy PVs of ours, never once our finalizer is gone;
- a VolumeAttachment naming the PV blocks DeleteVolume with Go's message;
- the DeleteVolume request, and its errors (not a CSI PV, driver without CREATE_DELETE_VOLUME).
"""

from __future__ import annotations

from typing import Any

import pytest

from kopf_csi.csi import messages as csi
from kopf_csi.provisioning import deletions
from kopf_csi.provisioning.deletions import DeletionError

from .factories import DRIVER, make_volume

BY = "pv.kubernetes.io/provisioned-by"
MIGRATED = "pv.kubernetes.io/migrated-to"
FIN = "external-provisioner.volume.kubernetes.io/finalizer"
OURS = {BY: DRIVER}


@pytest.mark.parametrize(
    ("volume", "known", "expected"),
    [
        pytest.param(make_volume(annotations=OURS), (), True, id="provisioned by us -> ours"),
        pytest.param(
            make_volume(annotations={BY: "other"}), (), False, id="provisioned by other -> not"
        ),
        pytest.param(
            make_volume(annotations={BY: "kubernetes.io/gce-pd", MIGRATED: DRIVER}),
            (),
            True,
            id="in-tree, migrated to us -> ours",
        ),
        pytest.param(
            make_volume(annotations={BY: "kubernetes.io/gce-pd"}),
            ("kubernetes.io/gce-pd",),
            True,
            id="in-tree name known -> ours",
        ),
        pytest.param(
            make_volume(csi={"driver": DRIVER}), (), True, id="static CSI PV of our driver -> ours"
        ),
        pytest.param(
            make_volume(csi={"driver": "other"}), (), False, id="static CSI PV of another -> not"
        ),
        pytest.param(
            make_volume(annotations={BY: "other"}, csi={"driver": DRIVER}),
            (),
            False,
            id="provisioned-by wins over driver -> not",
        ),
        pytest.param(
            make_volume(annotations={MIGRATED: DRIVER}),
            (),
            True,
            id="static in-tree migrated to us -> ours",
        ),
        pytest.param(make_volume(), (), False, id="nothing -> not"),
    ],
)
def test_is_ours(volume: dict[str, Any], known: tuple[str, ...], expected: bool) -> None:
    assert deletions.is_ours(volume, driver_name=DRIVER, known_names=known) is expected


@pytest.mark.parametrize(
    ("volume", "expected"),
    [
        pytest.param(make_volume(), [FIN], id="bound delete -> add"),
        pytest.param(
            make_volume(finalizers=["other"]),
            ["other", FIN],
            id="bound delete with others -> appended",
        ),
        pytest.param(make_volume(finalizers=[FIN]), None, id="already there -> unchanged"),
        pytest.param(make_volume(deleting=True), None, id="deleting -> not added"),
        pytest.param(make_volume(phase="Released"), None, id="released -> not added"),
        pytest.param(make_volume(phase=None), None, id="no phase -> not added"),
        pytest.param(
            make_volume(policy="Retain", finalizers=["a", FIN]), ["a"], id="retain -> removed"
        ),
        pytest.param(
            make_volume(policy="Recycle", finalizers=[FIN]), [], id="recycle -> removed, empty"
        ),
        pytest.param(
            make_volume(policy="Retain", finalizers=["a"]),
            None,
            id="retain without ours -> unchanged",
        ),
        pytest.param(
            make_volume(policy="Retain", deleting=True, finalizers=[FIN]),
            [],
            id="retain while deleting -> removed",
        ),
    ],
)
def test_volume_finalizers(volume: dict[str, Any], expected: list[str] | None) -> None:
    assert deletions.volume_finalizers(volume) == expected


@pytest.mark.parametrize(
    ("volume", "expected"),
    [
        pytest.param(
            make_volume(annotations=OURS, phase="Released", finalizers=[FIN]),
            True,
            id="released delete ours -> delete",
        ),
        pytest.param(
            make_volume(annotations=OURS, phase="Released"),
            True,
            id="released without finalizer, not deleting -> delete",
        ),
        pytest.param(
            make_volume(annotations=OURS, phase="Released", deleting=True, finalizers=[FIN]),
            True,
            id="deleting with our finalizer -> delete",
        ),
        pytest.param(
            make_volume(annotations=OURS, phase="Released", deleting=True, finalizers=["x"]),
            False,
            id="deleting, our finalizer gone -> done already",
        ),
        pytest.param(
            make_volume(annotations=OURS, phase="Bound", finalizers=[FIN]),
            False,
            id="bound -> keep",
        ),
        pytest.param(
            make_volume(annotations=OURS, phase="Failed", finalizers=[FIN]),
            False,
            id="failed -> keep",
        ),
        pytest.param(
            make_volume(annotations=OURS, phase="Released", policy="Retain"),
            False,
            id="retain -> never",
        ),
        pytest.param(
            make_volume(annotations=OURS, phase="Released", policy="Recycle"),
            False,
            id="recycle -> never",
        ),
        pytest.param(
            make_volume(annotations={BY: "other"}, phase="Released"), False, id="not ours -> never"
        ),
    ],
)
def test_should_delete(volume: dict[str, Any], expected: bool) -> None:
    decision = deletions.should_delete(volume, driver_name=DRIVER)
    assert bool(decision) is expected
    assert decision.reason


def attachment(pv: str | None, node: str = "node-1") -> dict[str, Any]:
    source: dict[str, Any] = {"persistentVolumeName": pv} if pv else {"inlineVolumeSpec": {}}
    return {"spec": {"attacher": DRIVER, "nodeName": node, "source": source}}


@pytest.mark.parametrize(
    ("attachments", "expected"),
    [
        pytest.param([], None, id="no attachments -> go"),
        pytest.param([attachment("other"), attachment(None)], None, id="other volumes -> go"),
        pytest.param(
            [attachment("other"), attachment("pv-1", "node-7"), attachment("pv-1", "node-8")],
            "persistentvolume pv-1 is still attached to node node-7",
            id="attached -> first blocker named",
        ),
    ],
)
def test_blocking_attachment(attachments: list[dict[str, Any]], expected: str | None) -> None:
    volume = make_volume(name="pv-1")
    assert deletions.blocking_attachment(volume, attachments=attachments) == expected


def test_delete_request() -> None:
    volume = make_volume(csi={"driver": DRIVER, "volumeHandle": "vol-1"})
    request = deletions.delete_request(
        volume,
        secrets={"k": "v"},
        plugin_capabilities={"CONTROLLER_SERVICE"},
        controller_capabilities={"CREATE_DELETE_VOLUME"},
    )
    assert request == csi.DeleteVolumeRequest(volume_id="vol-1", secrets={"k": "v"})


@pytest.mark.parametrize(
    ("volume", "controller", "message"),
    [
        pytest.param(
            make_volume(), {"CREATE_DELETE_VOLUME"}, "invalid CSI PV", id="not CSI -> invalid"
        ),
        pytest.param(
            make_volume(csi={"volumeHandle": "v"}),
            set(),
            "CSI driver does not support dynamic provisioning: controller CREATE_DELETE_VOLUME "
            "capability is not reported",
            id="driver cannot delete -> unsupported",
        ),
    ],
)
def test_delete_request_errors(volume: dict[str, Any], controller: set[str], message: str) -> None:
    with pytest.raises(DeletionError) as info:
        deletions.delete_request(
            volume,
            secrets=None,
            plugin_capabilities={"CONTROLLER_SERVICE"},
            controller_capabilities=controller,
        )
    assert str(info.value) == message
