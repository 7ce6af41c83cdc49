"""What explain read, and what it concluded: plain data between the reading, the rules and the
rendering.

`Observed` holds the objects read for one target, as the API returned them (plain dicts), plus
what the operator's debug endpoint said about it. `None` for an object means it was looked for
and does not exist; a name in `unreadable` means it could not be read (refused or failed), so
the rules say "unknown" instead of "missing". `Diagnosis` is the verdict: one line, the evidence
(one line per fact), and what to do.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
from typing import Any

from kopf_csi.targets import Target

__all__ = ["Diagnosis", "ExplainError", "Observed", "State"]

Body = dict[str, Any]


class ExplainError(Exception):
    """Explain itself could not work (exit code 2): one clear line."""


@dataclasses.dataclass
class Observed:
    """The objects one target depends on, as read; filled by `reading`, judged by `rules`."""

    target: Target
    now: datetime.datetime
    object: Body
    storage_class_name: str | None = None
    storage_class: Body | None = None
    lease_name: str | None = None
    leases: list[Body] = dataclasses.field(default_factory=list)
    csi_driver: Body | None = None
    pods: list[Body] = dataclasses.field(default_factory=list)
    node: Body | None = None
    csinode: Body | None = None
    secrets: dict[str, bool] = dataclasses.field(default_factory=dict)
    """`namespace/name` of each secret the class names for provisioning → whether it exists."""
    secret_error: str | None = None
    source: Body | None = None
    capacities: list[Body] = dataclasses.field(default_factory=list)
    volume: Body | None = None
    claim: Body | None = None
    attachments: list[Body] = dataclasses.field(default_factory=list)
    content: Body | None = None
    snapshot_classes: list[Body] = dataclasses.field(default_factory=list)
    """Every VolumeSnapshotClass, read for an unbound VolumeSnapshot (its class, or the default
    one of its source's driver)."""
    events: list[Body] = dataclasses.field(default_factory=list)
    provisioner_event: Body | None = None
    """The newest `Provisioning` event the class's provisioner posted on any claim, read only
    when no Lease of it is live: an operator without leader election shows in nothing else."""
    operator: Body | None = None
    """The operator's `/debug/objects/...` answer for the target, when asked and reachable."""
    operator_error: str | None = None
    content_operator: Body | None = None
    """The operator's answer for a VolumeSnapshot's bound content (where its calls are made)."""
    unreadable: dict[str, str] = dataclasses.field(default_factory=dict)
    """What could not be read (`storageclass`, `leases`, ...) → why."""


class State(enum.Enum):
    HEALTHY = "healthy"  # done, or working as it should: exit code 0
    BLOCKED = "blocked"  # something stops it, explained: exit code 1
    PROGRESSING = "progressing"  # not done, nothing wrong found yet: exit code 1


@dataclasses.dataclass(frozen=True)
class Diagnosis:
    target: Target
    state: State
    summary: str
    evidence: tuple[str, ...]
    next_steps: tuple[str, ...] = ()
    blocker: str | None = None
    """A stable identifier of the rule that found the blocker (`storageclass-missing`, ...)."""

    @property
    def exit_code(self) -> int:
        return 0 if self.state is State.HEALTHY else 1
