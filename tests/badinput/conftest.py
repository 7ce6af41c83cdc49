"""Fixtures of the bad-input suites: the provisioner suite's fast settings, nodes and operator."""

from __future__ import annotations

from ..properties import profile
from ..provisioner.conftest import (  # noqa: F401 (fixtures)
    nodes,
    operator,
    provisioner_options,
    settings,
)

profile.load()
