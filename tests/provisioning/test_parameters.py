"""StorageClass parameters: stripping the reserved keys, the fstype, the extra metadata.

We test these aspects:
- every reserved `csi.storage.k8s.io/*` key is stripped, other keys pass through;
- deprecated unprefixed keys (`fstype`, `csiProvisionerSecretName`, ...) are kept;
- an unknown key under the reserved prefix is a final error with Go's message;
- the fstype: the prefixed key, the deprecated key in any case, both (error), the default;
- `--extra-create-metadata` adds the claim's name and namespace and the PV name.
"""

from __future__ import annotations

import pytest

from kopf_csi import names
from kopf_csi.provisioning import parameters
from kopf_csi.provisioning.errors import ProvisioningError
from kopf_csi.provisioning.states import ProvisioningState

from .factories import make_claim


def test_every_reserved_key_is_stripped() -> None:
    given = {key: "x" for key in names.RESERVED_PARAMETERS} | {"type": "ssd"}
    assert parameters.driver_parameters(given) == {"type": "ssd"}


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        pytest.param(None, {}, id="no parameters -> empty"),
        pytest.param(
            {"type": "ssd", "iops": "300"}, {"type": "ssd", "iops": "300"}, id="plain -> kept"
        ),
        pytest.param({"fstype": "xfs"}, {"fstype": "xfs"}, id="deprecated fstype -> kept"),
        pytest.param(
            {"csiProvisionerSecretName": "s", "csiProvisionerSecretNamespace": "n"},
            {"csiProvisionerSecretName": "s", "csiProvisionerSecretNamespace": "n"},
            id="deprecated secret keys -> kept",
        ),
        pytest.param(
            {"csi.storage.k8s.io/fstype": "ext4", "CSI.storage.k8s.io/x": "y"},
            {"CSI.storage.k8s.io/x": "y"},
            id="prefix is case-sensitive -> other case kept",
        ),
    ],
)
def test_driver_parameters(given: dict[str, str] | None, expected: dict[str, str]) -> None:
    assert parameters.driver_parameters(given) == expected


@pytest.mark.parametrize(
    "key",
    ["csi.storage.k8s.io/pvc/name", "csi.storage.k8s.io/typo-secret-name", "csi.storage.k8s.io/"],
    ids=["metadata key in class -> error", "typo -> error", "bare prefix -> error"],
)
def test_unknown_reserved_key_is_final(key: str) -> None:
    with pytest.raises(ProvisioningError) as info:
        parameters.driver_parameters({key: "x", "type": "ssd"})
    assert info.value.state is ProvisioningState.FINISHED
    assert str(info.value) == (
        "failed to strip CSI Parameters of prefixed keys: found unknown parameter key"
        f' "{key}" with reserved namespace csi.storage.k8s.io/'
    )


@pytest.mark.parametrize(
    ("given", "default", "expected"),
    [
        pytest.param({}, "", "", id="nothing -> no fstype"),
        pytest.param({}, "ext4", "ext4", id="nothing with default -> default"),
        pytest.param({"csi.storage.k8s.io/fstype": "xfs"}, "ext4", "xfs", id="prefixed -> it"),
        pytest.param({"fstype": "xfs"}, "", "xfs", id="deprecated -> it"),
        pytest.param({"FsType": "btrfs"}, "", "btrfs", id="deprecated any case -> it"),
        pytest.param({"csi.storage.k8s.io/fstype": ""}, "ext4", "ext4", id="empty -> default"),
        pytest.param(
            {"CSI.storage.k8s.io/fstype": "xfs"}, "", "", id="prefix other case -> ignored"
        ),
    ],
)
def test_fs_type(given: dict[str, str], default: str, expected: str) -> None:
    assert parameters.fs_type(given, default=default) == expected


@pytest.mark.parametrize(
    "given",
    [
        {"fstype": "xfs", "csi.storage.k8s.io/fstype": "ext4"},
        {"fstype": "xfs", "FSTYPE": "ext4"},
    ],
    ids=["deprecated and prefixed -> error", "two cases of deprecated -> error"],
)
def test_fs_type_twice_is_final(given: dict[str, str]) -> None:
    with pytest.raises(ProvisioningError) as info:
        parameters.fs_type(given)
    assert info.value.final
    assert str(info.value) == (
        'fstype specified in parameters with both "fstype" and "csi.storage.k8s.io/fstype" keys'
    )


def test_extra_create_metadata() -> None:
    claim = make_claim(name="data", namespace="team")
    result = parameters.with_create_metadata({"type": "ssd"}, claim=claim, volume_name="pvc-1")
    assert result == {
        "type": "ssd",
        "csi.storage.k8s.io/pvc/name": "data",
        "csi.storage.k8s.io/pvc/namespace": "team",
        "csi.storage.k8s.io/pv/name": "pvc-1",
    }
