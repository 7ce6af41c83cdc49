"""State shared by the restart tests and `gated_hostdir` across operator threads."""

from __future__ import annotations

CALLS: list[str] = []
