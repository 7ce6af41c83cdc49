"""The outage suite's operator: the provisioner's end-to-end fixtures, with Go's own retry
intervals (1 s doubling to 5 min), so that a backoff grown during an outage shows."""

from __future__ import annotations

import dataclasses

import pytest

from kopf_csi.settings import ProvisionerOptions, Settings

from ..provisioner.conftest import nodes, operator  # noqa: F401 (fixtures used here)


@pytest.fixture
def settings(settings: Settings) -> Settings:
    csi = dataclasses.replace(settings.csi, timeout=10.0)
    return dataclasses.replace(settings, csi=csi, provisioner=ProvisionerOptions())
