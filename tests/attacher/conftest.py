"""Fixtures of the attacher's end-to-end tests: fast settings, a driver and modules to order.

`driver_options`, `attacher_options` and `health_options` take an indirect parameter
(`@pytest.mark.parametrize("driver_options", [{...}], indirect=True)`) or a module's override.
The operator runs only the modules the attacher needs: lifecycle, caches, attacher, health.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any

import pytest

from kopf_csi.attaching.options import AttacherOptions, HealthMonitorOptions
from kopf_csi.driver import DriverConfig, Features
from kopf_csi.settings import Settings

from ..conftest import NODE

FAST_ATTACHER = AttacherOptions(
    timeout=2.0, retry_interval_start=0.05, retry_interval_max=1.0, reconcile_sync=1000.0
)
QUIET_HEALTH = HealthMonitorOptions(monitor_interval=1000.0, list_volumes_interval=1000.0)


@pytest.fixture
def driver_options(request: pytest.FixtureRequest) -> dict[str, Any]:
    return dict(getattr(request, "param", {}))


@pytest.fixture
def attacher_options(request: pytest.FixtureRequest) -> AttacherOptions:
    return getattr(request, "param", FAST_ATTACHER)


@pytest.fixture
def health_options(request: pytest.FixtureRequest) -> HealthMonitorOptions:
    return getattr(request, "param", QUIET_HEALTH)


@pytest.fixture
def driver_config(tmp_path: pathlib.Path, driver_options: dict[str, Any]) -> DriverConfig:
    config = DriverConfig(
        node_id=NODE,
        data_dir=tmp_path / "driver",
        known_nodes=None,
        features=Features(attach=True),
        durable=False,
    )
    return dataclasses.replace(config, **driver_options)


@pytest.fixture
def handler_modules() -> tuple[str, ...]:
    return (
        "kopf_csi_handlers.lifecycle",
        "kopf_csi_handlers.caches",
        "kopf_csi_handlers.attacher",
        "kopf_csi_handlers.health",
    )


@pytest.fixture
def settings(
    settings: Settings, attacher_options: AttacherOptions, health_options: HealthMonitorOptions
) -> Settings:
    return dataclasses.replace(settings, attacher=attacher_options, health=health_options)
