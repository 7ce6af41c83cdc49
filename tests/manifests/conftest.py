"""One run of the operator through every feature, shared by the manifests tests (about 3 s)."""

from __future__ import annotations

import asyncio

import pytest

from .rendering import rbac
from .scenarios import Observation, observe


@pytest.fixture(scope="package")
def observation(tmp_path_factory: pytest.TempPathFactory) -> Observation:
    # A sync fixture with its own event loop: the operator runs in a thread of its own anyway,
    # and the package scope lets the RBAC and CRD tests share one run.
    return asyncio.run(observe(tmp_path_factory.mktemp("observed"), rbac()))
