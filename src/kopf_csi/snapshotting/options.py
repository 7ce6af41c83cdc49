"""The csi-snapshotter's settings, named after its Go flags, with the code defaults.

Frozen and validated once; `kopf_csi.settings` groups them with the others. Nothing here reads
the environment.
"""

from __future__ import annotations

import dataclasses

from kopf_csi import names

__all__ = ["SnapshotterOptions"]


@dataclasses.dataclass(frozen=True)
class SnapshotterOptions:
    enabled: bool = True
    """Run the snapshotter when the driver has CREATE_DELETE_SNAPSHOT."""

    timeout: float = 60.0
    """`--timeout` (1m): seconds for each CreateSnapshot, DeleteSnapshot, ListSnapshots call."""

    workers: int = 10
    """`--worker-threads` (10): contents worked on at once."""

    retry_interval_start: float = 1.0
    """`--retry-interval-start` (1s): the first retry delay of a content (and the first poll
    of a snapshot that is not ready yet)."""

    retry_interval_max: float = 300.0
    """`--retry-interval-max` (5m): the longest retry or poll delay."""

    resync_period: float = 900.0
    """`--resync-period` (15m): every content of our driver is looked at again this often."""

    snapshot_name_prefix: str = names.DEFAULT_SNAPSHOT_NAME_PREFIX
    """`--snapshot-name-prefix`: CreateSnapshot's name is `<prefix>-<VolumeSnapshot uid>`."""

    snapshot_name_uuid_length: int = -1
    """`--snapshot-name-uuid-length`: -1 keeps the uid whole; N drops its dashes and keeps N."""

    extra_create_metadata: bool = False
    """`--extra-create-metadata`: add the VolumeSnapshot's name and namespace and the content's
    name to the CreateSnapshot parameters."""

    enable_volume_group_snapshots: bool = True
    """`--enable-volume-group-snapshots` (csi-snapshotter v7's flag; v8 turned it into the
    `CSIVolumeGroupSnapshot` feature gate, GA and on): run the group snapshot controller for
    the VolumeGroupSnapshotContents of our driver, when the driver has the
    GROUP_CONTROLLER_SERVICE with CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT."""

    group_snapshot_name_prefix: str = names.DEFAULT_GROUP_SNAPSHOT_NAME_PREFIX
    """`--groupsnapshot-name-prefix`: CreateVolumeGroupSnapshot's name is
    `<prefix>-<VolumeGroupSnapshot uid>`."""

    group_snapshot_name_uuid_length: int = -1
    """`--groupsnapshot-name-uuid-length`: -1 keeps the uid whole; N drops its dashes, keeps N."""

    use_get_snapshot: bool = True
    """Read a snapshot's status with GetSnapshot when the driver has GET_SNAPSHOT (CSI 1.12),
    else with ListSnapshots. Upstream always lists; both give the same answer."""

    def __post_init__(self) -> None:
        if not 0 < self.retry_interval_start <= self.retry_interval_max:
            raise ValueError("retry intervals must satisfy 0 < start <= max")
        if self.timeout <= 0 or self.resync_period <= 0:
            raise ValueError("the timeout and the resync period must be more than zero")
        if self.workers < 1:
            raise ValueError("the snapshotter needs at least one worker")
        if not self.snapshot_name_prefix:
            raise ValueError("the snapshot name prefix must not be empty")
        for length in (self.snapshot_name_uuid_length, self.group_snapshot_name_uuid_length):
            if length == 0 or length < -1:
                raise ValueError("the snapshot name uuid length must be -1 or more than zero")
        if not self.group_snapshot_name_prefix:
            raise ValueError("the group snapshot name prefix must not be empty")
