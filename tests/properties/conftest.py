"""Property-based tests (hypothesis) of the pure request builders and decision functions."""

from __future__ import annotations

from . import profile

profile.load()
