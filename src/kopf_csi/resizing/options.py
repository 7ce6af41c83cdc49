"""The resizer's settings, named after external-resizer's flags, with the Go defaults.

Frozen and validated once. `kopf_csi.settings` groups them with the others; nothing here reads
the environment.
"""

from __future__ import annotations

import dataclasses

__all__ = ["ResizerOptions"]


@dataclasses.dataclass(frozen=True)
class ResizerOptions:
    enabled: bool = True
    """Run the resizer (and the modify controller) when the driver can expand or modify."""

    timeout: float = 10.0
    """`--timeout` (10s): seconds for each ControllerExpandVolume/ControllerModifyVolume call."""

    workers: int = 10
    """`--workers` (10): claims resized at once; the modify controller has as many again."""

    retry_interval_start: float = 1.0
    """`--retry-interval-start` (1s): the first retry delay of a claim."""

    retry_interval_max: float = 300.0
    """`--retry-interval-max` (5m): the longest retry delay, and the slow retry after an
    infeasible error (the Go slow set's interval)."""

    resync_period: float = 600.0
    """`--resync-period` (10m): how often every claim with a pending resize is looked at again."""

    handle_volume_inuse_error: bool = True
    """`--handle-volume-inuse-error` (true): after FailedPrecondition ("volume in use" from an
    offline-only driver), do not call the driver again while the volume is in use. Upstream
    watches every pod for this; we look the claim's users up only then (see `inuse`)."""

    extra_modify_metadata: bool = False
    """`--extra-modify-metadata`: add the PVC's and PV's names to ControllerModifyVolume's
    mutable parameters (`csi.storage.k8s.io/pvc/name`, `.../pvc/namespace`, `.../pv/name`)."""

    def __post_init__(self) -> None:
        if not 0 < self.retry_interval_start <= self.retry_interval_max:
            raise ValueError("retry intervals must satisfy 0 < start <= max")
        if min(self.timeout, self.resync_period) <= 0:
            raise ValueError("the timeout and the resync period must be more than zero")
        if self.workers < 1:
            raise ValueError("the resizer needs at least one worker")
