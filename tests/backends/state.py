"""What the tests script for `memory_backend`, shared across operator threads (not reloaded)."""

from __future__ import annotations

from typing import Any

SCRIPT: dict[str, list[Any]] = {}
"""Claim name → what its next attempts return (a ProvisionResult) or raise; then success."""
DELETE_SCRIPT: dict[str, list[BaseException]] = {}
"""PV name → what its next deletions raise; then success."""
MADE: dict[str, int] = {}
"""Volume name → how many attempts made it (a retry must find it, not make another)."""
DELETED: list[str] = []


def reset() -> None:
    SCRIPT.clear()
    DELETE_SCRIPT.clear()
    MADE.clear()
    DELETED.clear()
