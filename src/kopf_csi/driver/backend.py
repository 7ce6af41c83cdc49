"""What the servicers share: the config, the records, the content on disk, the faults, a lock.

One `Backend` per running driver; a restart builds a new one from the same data directory,
which is how persistence is proven. Lookups that every RPC repeats live here (a volume or
NOT_FOUND, a volume's condition, a pool's free bytes); the RPCs' own logic does not.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import structlog

from kopf_csi.csi.codes import Code
from kopf_csi.driver import capacity, secrets
from kopf_csi.driver.calllog import CallLog, Outcome
from kopf_csi.driver.config import DriverConfig
from kopf_csi.driver.errors import DriverError
from kopf_csi.driver.faults import Faults
from kopf_csi.driver.records import Snapshot, Volume
from kopf_csi.driver.state import State
from kopf_csi.driver.storage import Storage

__all__ = ["Backend"]

logger = structlog.get_logger("kopf_csi.driver")


class Backend:
    """The state of one driver instance, loaded from its data directory."""

    def __init__(
        self, config: DriverConfig, *, faults: Faults, calls: CallLog | None = None
    ) -> None:
        self.config = config
        self.faults = faults
        self.calls = calls
        self.storage = Storage(config.data_dir)
        self.storage.prepare()
        self.state = State.load(config.data_dir, durable=config.durable)
        removed = self.storage.remove_orphans(
            volume_ids=set(self.state.volumes), snapshot_ids=set(self.state.snapshots)
        )
        if removed:
            logger.info("orphans_removed", paths=removed)
        # Mutations that await (copies) must not interleave with others: two creates of the
        # same name would both see no volume. Serialising them is simplest and cheap here.
        self.lock = asyncio.Lock()

    @property
    def topology_key(self) -> str | None:
        return self.config.topology_key if self.config.features.topology else None

    def check_secrets(self, method: str, given: Mapping[str, str]) -> None:
        secrets.check(method, given, policy=self.config.secrets)

    def volume(self, volume_id: str) -> Volume:
        volume = self.state.volume(volume_id)
        if volume is None:
            raise DriverError(Code.NOT_FOUND, f"volume {volume_id} does not exist")
        return volume

    def snapshot(self, snapshot_id: str) -> Snapshot:
        snapshot = self.state.snapshot(snapshot_id)
        if snapshot is None:
            raise DriverError(Code.NOT_FOUND, f"snapshot {snapshot_id} does not exist")
        return snapshot

    def problem(self, volume: Volume) -> str | None:
        """Why the volume is abnormal (injected, or its content is gone), or None."""
        injected = self.faults.abnormal(volume.volume_id)
        if injected is not None:
            return injected
        if not self.storage.has_volume(volume.volume_id):
            return "the volume's content is missing from the data directory"
        return None

    def available(self, pool: str) -> int:
        return capacity.available(
            total=self.config.limits.total_capacity,
            used=capacity.used(self.state.volumes.values(), pool=pool),
            free=self.storage.free_bytes(),
        )

    def attached_to(self, node_id: str) -> int:
        return sum(1 for v in self.state.volumes.values() if node_id in v.attachments)

    def record(
        self, method: str, outcome: Outcome, *, volume_id: str, name: str = "", node_id: str = ""
    ) -> None:
        """Tell the call log (if any) what a successful call did (see `calllog`)."""
        if self.calls is not None:
            self.calls.record(method, outcome, volume_id=volume_id, name=name, node_id=node_id)

    def require_feature(self, enabled: bool, method: str) -> None:
        """UNIMPLEMENTED for an RPC whose feature is switched off (it is not advertised)."""
        if not enabled:
            raise DriverError(Code.UNIMPLEMENTED, f"{method} is not enabled in this driver")
