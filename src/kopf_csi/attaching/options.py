"""The attacher's and the health monitor's settings, named after their Go flags, with defaults.

Frozen and validated once. `kopf_csi.settings` groups them with the others; nothing here reads
the environment.
"""

from __future__ import annotations

import dataclasses

__all__ = ["AttacherOptions", "HealthMonitorOptions"]


@dataclasses.dataclass(frozen=True)
class AttacherOptions:
    timeout: float = 15.0
    """`--timeout`: seconds for each ControllerPublish/Unpublish and ListVolumes call."""

    retry_interval_start: float = 1.0
    """`--retry-interval-start`: the first retry delay of a VolumeAttachment, in seconds."""

    retry_interval_max: float = 300.0
    """`--retry-interval-max`: the longest retry delay."""

    default_fstype: str = ""
    """`--default-fstype`: the mount capability's fs_type when the PV names none."""

    reconcile_sync: float = 60.0
    """`--reconcile-sync`: seconds between comparisons of ListVolumes with the VAs."""

    max_entries: int = 0
    """`--max-entries`: the ListVolumes page size of the reconciler; 0 lets the driver choose."""

    def __post_init__(self) -> None:
        if not 0 < self.retry_interval_start <= self.retry_interval_max:
            raise ValueError("retry intervals must satisfy 0 < start <= max")
        if self.timeout <= 0 or self.reconcile_sync <= 0:
            raise ValueError("the timeout and the reconcile interval must be more than zero")
        if self.max_entries < 0:
            raise ValueError("max entries must not be negative")


@dataclasses.dataclass(frozen=True)
class HealthMonitorOptions:
    enabled: bool = True
    """Run the monitor when the driver can report volume conditions."""

    monitor_interval: float = 60.0
    """`--monitor-interval`: seconds between rounds of ControllerGetVolume (no ListVolumes)."""

    list_volumes_interval: float = 300.0
    """`--list-volumes-interval`: seconds between rounds of ListVolumes."""

    timeout: float = 15.0
    """`--timeout`: seconds for each ListVolumes page or ControllerGetVolume call."""

    workers: int = 10
    """`--worker-threads`: ControllerGetVolume calls at once."""

    def __post_init__(self) -> None:
        if min(self.monitor_interval, self.list_volumes_interval, self.timeout) <= 0:
            raise ValueError("the health monitor's intervals and timeout must be more than zero")
        if self.workers < 1:
            raise ValueError("the health monitor needs at least one worker")
