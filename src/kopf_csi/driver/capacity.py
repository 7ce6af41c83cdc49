"""Sizes and capacity pools: pure arithmetic, no I/O.

CSI's `CapacityRange` has two optional int64 bounds where 0 means unset (proto3). A volume gets
`required_bytes` if set, else the default size clamped to `limit_bytes`. A pool is the total
capacity of one node with topology (as each hostpath instance has its own disk), or of the whole
driver without; volumes count against the pool of their node. Snapshots do not count: they are
copies outside the volumes' pool, like a backup target.
"""

from __future__ import annotations

from collections.abc import Iterable

from kopf_csi.csi.codes import Code
from kopf_csi.driver.errors import DriverError
from kopf_csi.driver.records import Volume

__all__ = ["available", "fits_range", "pool_of", "size_for", "used"]


def size_for(
    *,
    required: int,
    limit: int,
    default: int,
    maximum: int | None,
    minimum: int = 0,
) -> int:
    """The size of a new or expanded volume, or OUT_OF_RANGE.

    `minimum` is the size of the content source: a volume smaller than its snapshot or
    source volume cannot hold the content (CreateVolume's OUT_OF_RANGE row in the spec).
    """
    if required < 0 or limit < 0:
        raise DriverError(Code.INVALID_ARGUMENT, "capacity_range bounds must not be negative")
    if limit and required > limit:
        raise DriverError(
            Code.OUT_OF_RANGE, f"required_bytes {required} exceed limit_bytes {limit}"
        )
    size = required or (min(default, limit) if limit else default)
    size = max(size, minimum)
    if limit and size > limit:
        raise DriverError(
            Code.OUT_OF_RANGE, f"the content source needs {size} bytes, over limit_bytes {limit}"
        )
    if maximum is not None and size > maximum:
        raise DriverError(
            Code.OUT_OF_RANGE, f"{size} bytes exceed the maximum volume size {maximum}"
        )
    return size


def fits_range(size: int, *, required: int, limit: int) -> bool:
    """Whether an existing volume satisfies a capacity range (idempotent CreateVolume)."""
    return size >= required and (not limit or size <= limit)


def pool_of(volume: Volume) -> str:
    """The pool a volume counts against: its node, or "" for the single pool."""
    return volume.node or ""


def used(volumes: Iterable[Volume], *, pool: str) -> int:
    return sum(v.size for v in volumes if pool_of(v) == pool)


def available(*, total: int | None, used: int, free: int) -> int:
    """Bytes still available in a pool; without a configured total, the disk's free space."""
    if total is None:
        return max(free, 0)
    return max(total - used, 0)
