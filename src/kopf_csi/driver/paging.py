"""Paging for ListVolumes and ListSnapshots: `max_entries`, `starting_token`, `next_token`.

The token is the offset of the next entry in the stable (creation) order. The spec lets a
listing miss or repeat entries that come or go while a CO pages, so an offset is enough; a token
that is not an offset into the current list is ABORTED, and the CO starts over.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from kopf_csi.csi.codes import Code
from kopf_csi.driver.errors import DriverError

__all__ = ["page"]

T = TypeVar("T")


def page(items: Sequence[T], *, starting_token: str, max_entries: int) -> tuple[list[T], str]:
    """One page of `items` and the token of the next page ("" for the last page)."""
    if max_entries < 0:
        raise DriverError(Code.INVALID_ARGUMENT, "max_entries must not be negative")
    start = _offset(starting_token, count=len(items))
    end = len(items) if not max_entries else min(start + max_entries, len(items))
    next_token = str(end) if end < len(items) else ""
    return list(items[start:end]), next_token


def _offset(token: str, *, count: int) -> int:
    if not token:
        return 0
    if not (token.isascii() and token.isdigit()) or int(token) > count:
        raise DriverError(Code.ABORTED, f"invalid starting_token {token!r}")
    return int(token)
