"""The PV name (= the CSI volume name), the provisioner identity, and a claim's class name.

We test these aspects:
- `<prefix>-<uid>`, and the UUID-length truncation without dashes, as `makeVolumeName`;
- an empty prefix or UID is a final error with Go's message;
- the identity is `<ms>-<random>-<driver>`;
- the class name comes from the beta annotation before `spec.storageClassName`.
"""

from __future__ import annotations

import pytest

from kopf_csi.provisioning import naming
from kopf_csi.provisioning.errors import ProvisioningError

from .factories import UID, make_claim


@pytest.mark.parametrize(
    ("prefix", "uuid_length", "expected"),
    [
        pytest.param("pvc", -1, f"pvc-{UID}", id="default -> full uid with dashes"),
        pytest.param("vol", -1, f"vol-{UID}", id="custom prefix -> used"),
        pytest.param("pvc", 8, "pvc-6a2b1c3d", id="length 8 -> first 8 hex digits"),
        pytest.param("pvc", 12, "pvc-6a2b1c3d4e5f", id="length 12 -> dashes removed first"),
        pytest.param("pvc", 32, f"pvc-{UID.replace('-', '')}", id="length 32 -> all hex digits"),
        pytest.param("pvc", 0, "pvc-", id="length 0 -> prefix and dash only (as Go)"),
    ],
)
def test_volume_name(prefix: str, uuid_length: int, expected: str) -> None:
    assert naming.volume_name(prefix=prefix, uid=UID, uuid_length=uuid_length) == expected


@pytest.mark.parametrize(
    ("prefix", "uid", "message"),
    [
        pytest.param("", UID, "volume name prefix cannot be of length 0", id="no prefix -> error"),
        pytest.param("pvc", "", "corrupted PVC object, it is missing UID", id="no uid -> error"),
    ],
)
def test_volume_name_errors(prefix: str, uid: str, message: str) -> None:
    with pytest.raises(ProvisioningError, match=f"^{message}$") as info:
        naming.volume_name(prefix=prefix, uid=uid)
    assert info.value.final


def test_claim_volume_name() -> None:
    assert naming.claim_volume_name(make_claim(), prefix="pvc") == f"pvc-{UID}"


def test_provisioner_identity() -> None:
    identity = naming.provisioner_identity(
        driver_name="hostpath.csi.k8s.io", millis=1700000000123, random_number=42
    )
    assert identity == "1700000000123-42-hostpath.csi.k8s.io"


@pytest.mark.parametrize(
    ("annotations", "storage_class", "expected"),
    [
        pytest.param({}, "fast", "fast", id="spec only -> spec"),
        pytest.param(
            {"volume.beta.kubernetes.io/storage-class": "old"},
            "fast",
            "old",
            id="beta annotation -> wins",
        ),
        pytest.param(
            {"volume.beta.kubernetes.io/storage-class": ""},
            "fast",
            "",
            id="empty beta annotation -> still wins",
        ),
        pytest.param({}, None, "", id="neither -> empty"),
    ],
)
def test_claim_class_name(
    annotations: dict[str, str], storage_class: str | None, expected: str
) -> None:
    claim = make_claim(annotations=annotations, storage_class=storage_class)
    assert naming.claim_class_name(claim) == expected
    assert naming.volume_class_name(claim) == expected
