"""The provisioner options: the Go flags' defaults, and the values the Go sidecar cannot take.

We test these aspects:
- the defaults are external-provisioner's flag defaults;
- an empty prefix, a UUID length outside -1..32 and inverted retry intervals are refused.
"""

from __future__ import annotations

from typing import Any

import pytest

from kopf_csi.provisioning.options import ProvisionerOptions


def test_defaults_match_the_go_flags() -> None:
    options = ProvisionerOptions()
    assert options.volume_name_prefix == "pvc"
    assert options.volume_name_uuid_length == -1
    assert options.default_fstype == ""
    assert options.extra_create_metadata is False
    assert options.strict_topology is False
    assert options.immediate_topology is True
    assert options.controller_publish_readonly is False
    assert options.prevent_volume_mode_conversion is True
    assert (options.retry_interval_start, options.retry_interval_max) == (1.0, 300.0)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        pytest.param({"volume_name_prefix": ""}, "prefix cannot be", id="empty prefix -> refused"),
        pytest.param(
            {"volume_name_uuid_length": -2}, "UUID length", id="uuid length -2 -> refused"
        ),
        pytest.param(
            {"volume_name_uuid_length": 33},
            "UUID length",
            id="uuid length 33 (Go panics) -> refused",
        ),
        pytest.param({"retry_interval_start": 0}, "retry intervals", id="zero start -> refused"),
        pytest.param(
            {"retry_interval_start": 10, "retry_interval_max": 5},
            "retry intervals",
            id="start > max -> refused",
        ),
    ],
)
def test_invalid_options(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ProvisionerOptions(**changes)
