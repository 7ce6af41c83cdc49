"""Fixtures of the secret-leak suite: the whole operator, a driver that insists on secrets.

The operator runs every default handler module (provisioner and attacher) with the provisioner
suite's fast settings, and the attacher's fast retries. The driver refuses CreateVolume,
DeleteVolume and Controller(Un)PublishVolume without exactly `CREDENTIALS`. `outputs` captures
every log record of the process at DEBUG (the in-process driver's own records left out: it
stands for the other side of the socket), for `LeakChecker` to search with the cluster.
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Iterator, Mapping

import pytest

from kopf_csi.driver import DriverConfig, SecretsPolicy
from kopf_csi.settings import CSISettings, ProvisionerOptions, Settings
from kopf_csi.testing.emulator import Body, EmulatedCluster
from kopf_csi.testing.secrets import CapturedLogs, LeakChecker, capture_logs

from ..attacher.conftest import FAST_ATTACHER
from ..provisioner.conftest import (  # noqa: F401 (fixtures)
    CSI_TIMEOUT,
    NAMESPACE,
    RETRY_MAX,
    RETRY_START,
    nodes,
    operator,
)

# Values long and odd enough never to occur by chance in any output.
CREDENTIALS = {"user": "svc-7Qz!user", "password": "pw-Xk93#secret-value"}
SECURED = frozenset(
    {"CreateVolume", "DeleteVolume", "ControllerPublishVolume", "ControllerUnpublishVolume"}
)


@pytest.fixture
def settings(settings: Settings) -> Settings:
    provisioner_options = ProvisionerOptions(
        retry_interval_start=RETRY_START, retry_interval_max=RETRY_MAX
    )
    csi = CSISettings(address=settings.csi.address, timeout=CSI_TIMEOUT, connect_timeout=10.0)
    return dataclasses.replace(
        settings, csi=csi, provisioner=provisioner_options, attacher=FAST_ATTACHER
    )


@pytest.fixture
def driver_config(driver_config: DriverConfig) -> DriverConfig:
    policy = SecretsPolicy(required_for=SECURED, expected=CREDENTIALS)
    return dataclasses.replace(driver_config, secrets=policy)


@pytest.fixture
def outputs() -> Iterator[CapturedLogs]:
    with capture_logs(exclude=("kopf_csi.driver",)) as logs:
        yield logs


@pytest.fixture
def checker() -> LeakChecker:
    return LeakChecker(CREDENTIALS.values())


def make_secret(
    cluster: EmulatedCluster, name: str, data: Mapping[str, str], namespace: str = NAMESPACE
) -> Body:
    encoded = {key: base64.b64encode(value.encode()).decode() for key, value in data.items()}
    metadata = {"name": name, "namespace": namespace}
    body = {"apiVersion": "v1", "kind": "Secret", "metadata": metadata, "data": encoded}
    return cluster.create("secrets", body)
