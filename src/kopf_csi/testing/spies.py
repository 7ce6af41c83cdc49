"""Spies on the reference driver for tests: what reached it, seen from inside the driver.

Two pytest fixtures (kopf-csi's own suite registers this module with ``pytest_plugins`` in
tests/conftest.py; another suite may do the same), each wrapping one method of the running
`driver` fixture's instance for the duration of a test:

- `calls`: every RPC the driver received, in order, with its monotonic time. It wraps the
  fault plan, which the driver consults first, so calls that a fault fails or hangs count too;
- `secrets_seen`: the secrets every secret-bearing RPC carried, as (method, secrets), wrapping
  the backend's secrets check (which still runs, so a wrong secret still fails the call).

The spies only record; the driver behaves exactly as without them.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import pytest

from kopf_csi.driver import Driver
from kopf_csi.driver.faults import Plan

__all__ = ["Calls", "SecretsSeen", "calls", "secrets_seen"]

SecretsSeen = list[tuple[str, dict[str, str]]]


class Calls:
    """RPCs as they reach the driver (before faults), in order, with their monotonic times."""

    def __init__(self) -> None:
        self.log: list[tuple[str, float]] = []

    def count(self, method: str) -> int:
        return sum(1 for name, _ in self.log if name == method)

    def times(self, method: str) -> list[float]:
        return [when for name, when in self.log if name == method]

    @property
    def methods(self) -> list[str]:
        return [name for name, _ in self.log]


@pytest.fixture
def calls(driver: Driver, monkeypatch: pytest.MonkeyPatch) -> Calls:
    """Every RPC the driver received, spied on through its fault plan (consulted first)."""
    seen = Calls()
    original = driver.faults.plan

    def plan(method: str) -> Plan:
        seen.log.append((method, time.monotonic()))
        return original(method)

    monkeypatch.setattr(driver.faults, "plan", plan)
    return seen


@pytest.fixture
def secrets_seen(driver: Driver, monkeypatch: pytest.MonkeyPatch) -> SecretsSeen:
    """The secrets every secret-bearing RPC carried, as (method, secrets)."""
    seen: SecretsSeen = []
    backend = driver.backend
    original = backend.check_secrets

    def check(method: str, given: Mapping[str, str]) -> None:
        seen.append((method, dict(given)))
        original(method, given)

    monkeypatch.setattr(backend, "check_secrets", check)
    return seen
