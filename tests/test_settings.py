"""Settings from the environment: the defaults, and a clear error for every bad value.

We test these aspects:
- with nothing set, the Go sidecars' defaults (socket path, 10 s timeout, 30 s connect wait);
- durations accept `10` and `10s`; a bare path and `unix://` addresses are kept as given;
- a value that is not a duration, or not above zero, or a boolean that is not one, is a
  SettingsError naming the variable and the value.
"""

from __future__ import annotations

import pathlib

import pytest

from kopf_csi import flags
from kopf_csi.settings import SettingsError


def test_defaults_are_the_go_sidecars() -> None:
    settings = flags.from_env({})
    assert settings.csi.address == "/run/csi/socket"
    assert settings.csi.timeout == 10.0
    assert settings.csi.connect_timeout == 30.0
    assert settings.kube.kubeconfig is None
    assert settings.kube.namespace == "default"
    assert not settings.provisioner.node_deployment


def test_values_from_the_environment() -> None:
    settings = flags.from_env(
        {
            "CSI_ADDRESS": "unix:///csi/csi.sock",
            "CSI_TIMEOUT": "15s",
            "CSI_CONNECT_TIMEOUT": "5",
            "KUBECONFIG": "/etc/kube/config",
            "POD_NAMESPACE": "storage",
        }
    )
    assert settings.csi.address == "unix:///csi/csi.sock"
    assert settings.csi.timeout == 15.0
    assert settings.csi.connect_timeout == 5.0
    assert settings.kube.kubeconfig == pathlib.Path("/etc/kube/config")
    assert settings.kube.namespace == "storage"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        pytest.param({"CSI_TIMEOUT": "soon"}, "CSI_TIMEOUT='soon' is not a duration",
                     id="not a number -> named error"),
        pytest.param({"CSI_TIMEOUT": "0"}, "CSI_TIMEOUT='0' must be more than zero",
                     id="zero -> named error"),
        pytest.param({"CSI_CONNECT_TIMEOUT": "-3s"}, "CSI_CONNECT_TIMEOUT='-3s' must be more",
                     id="negative -> named error"),
        pytest.param({"NODE_DEPLOYMENT": "maybe", "NODE_NAME": "n"},
                     "NODE_DEPLOYMENT='maybe' is not a boolean", id="not a boolean -> named error"),
        pytest.param({"NODE_DEPLOYMENT": "true"}, "NODE_NAME",
                     id="node deployment without a node -> named error"),
    ],
)  # fmt: skip
def test_bad_values_are_clear_errors(env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError) as err:
        flags.from_env(env)
    assert message in str(err.value)
