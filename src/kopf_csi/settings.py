"""The operator's settings: frozen, grouped, each field documented where it is declared.

Names follow the Go sidecars' flags (`--csi-address` → `csi.address`, `--timeout` →
`csi.timeout`). Settings are parsed once, by an entry point, and handed to the handlers through
kopf's memo; nothing else reads the environment. `kopf_csi.flags.from_env()` is the fallback
used when the handler modules run under a bare `kopf run`. This module imports no parser: the
flag table (`kopf_csi.flags`) reads these classes, never the other way round.
"""

from __future__ import annotations

import dataclasses
import pathlib
import re

from kopf_csi.attaching.options import AttacherOptions, HealthMonitorOptions
from kopf_csi.provisioning.options import ProvisionerOptions
from kopf_csi.resizing.options import ResizerOptions
from kopf_csi.snapshotting.options import SnapshotterOptions

__all__ = [
    "AttacherOptions",
    "CSISettings",
    "CapacitySettings",
    "HTTPSettings",
    "HealthMonitorOptions",
    "KubeSettings",
    "LeaderElectionSettings",
    "ProvisionerOptions",
    "ResizerOptions",
    "Settings",
    "SettingsError",
    "SnapshotterOptions",
    "WorkerSettings",
]


class SettingsError(ValueError):
    """A setting has a value we cannot use; the message names the setting and the value."""


LEADER_ELECTION_JITTER = 1.2
"""client-go's leaderelection.JitterFactor: retries come up to 1.2 retry periods apart."""

_ENDPOINT = re.compile(r"(?:[^\s:/]*|\[[0-9a-fA-F:.]+\]):\d{1,5}")
"""Go's net.Listen address: `:8080`, `0.0.0.0:8080`, `localhost:8080`, `[::]:8080`."""


def _require_positive(group: object, *fields: str) -> None:
    for name in fields:
        value = getattr(group, name)
        if not value > 0:  # also refuses NaN
            raise ValueError(f"{name.replace('_', ' ')} must be more than zero, got {value:g}")


@dataclasses.dataclass(frozen=True)
class CSISettings:
    address: str = "/run/csi/socket"
    """`--csi-address`: the driver's socket, a bare path or `unix://<path>`."""

    timeout: float = 10.0
    """`--timeout`: how long each CSI call may take (external-provisioner's code default)."""

    connect_timeout: float = 30.0
    """How long to wait at start-up for the driver to be ready (csi-lib-utils' dial timeout);
    a socket path that does not exist at all is given up after 5 s."""

    disabled: bool = False
    """`--no-csi`: run without a CSI driver, for the provisioners that handler modules register
    (`register_provisioner`); the CSI controllers stay idle and the address is not used."""

    def __post_init__(self) -> None:
        _require_positive(self, "timeout", "connect_timeout")
        if not self.address:
            raise ValueError("the CSI address cannot be empty")
        if "://" in self.address and not self.address.startswith("unix://"):
            raise ValueError(f"the CSI address must be a unix socket, not {self.address!r}")


@dataclasses.dataclass(frozen=True)
class KubeSettings:
    kubeconfig: pathlib.Path | None = None
    """`--kubeconfig`: the kubeconfig file; empty means in-cluster, then the usual locations."""

    namespace: str = "default"
    """The operator's own namespace: where its Leases and its in-flight journal are."""

    qps: float = 100.0
    """`--kube-api-qps`: Kubernetes API requests per second, on average, for each sidecar
    role, as each Go sidecar's client has its own (`kube.Limits`): a request beyond the
    burst waits for its turn."""

    burst: int = 200
    """`--kube-api-burst`: Kubernetes API requests each role may send at once before the
    QPS applies (client-go's token bucket)."""

    cache_resync: float = 600.0
    """How often the cached kinds are listed again, to drop objects whose deletion no watch
    event reported (one deleted while the operator was starting); 0 turns it off."""

    def __post_init__(self) -> None:
        _require_positive(self, "qps")
        if self.cache_resync < 0:
            raise ValueError(f"the cache resync cannot be negative, got {self.cache_resync}")
        if self.burst < 1:
            raise ValueError(f"the kube API burst must be at least 1, got {self.burst}")
        if not self.namespace:
            raise ValueError("the operator's namespace cannot be empty")


@dataclasses.dataclass(frozen=True)
class LeaderElectionSettings:
    enabled: bool = False
    """`--leader-election`: run active/passive; only the holder of the Leases works."""

    namespace: str | None = None
    """`--leader-election-namespace`: where the Leases are; empty means the own namespace."""

    lease_duration: float = 15.0
    """`--leader-election-lease-duration`: how long a Lease is valid without renewal."""

    renew_deadline: float = 10.0
    """`--leader-election-renew-deadline`: how long the leader keeps trying to renew."""

    retry_period: float = 5.0
    """`--leader-election-retry-period`: the wait between attempts to acquire or renew."""

    identity: str = ""
    """This replica's name in the Lease's holderIdentity; empty means the host name."""

    def __post_init__(self) -> None:
        # client-go's leaderelection.NewLeaderElector refuses the same: the leader must give up
        # before its Lease expires, and retry (with up to 1.2x jitter) before it gives up.
        _require_positive(self, "lease_duration", "renew_deadline", "retry_period")
        if self.lease_duration <= self.renew_deadline:
            raise ValueError(
                "the leader election lease duration must be more than the renew deadline"
            )
        if self.renew_deadline <= LEADER_ELECTION_JITTER * self.retry_period:
            raise ValueError(
                "the leader election renew deadline must be more than"
                f" {LEADER_ELECTION_JITTER:g} x the retry period"
            )


@dataclasses.dataclass(frozen=True)
class HTTPSettings:
    endpoint: str = ""
    """`--http-endpoint`: where to serve metrics and health (`:8080`); empty means off."""

    metrics_path: str = "/metrics"
    """`--metrics-path`: where Prometheus scrapes the metrics on that endpoint."""

    def __post_init__(self) -> None:
        if self.endpoint and not _ENDPOINT.fullmatch(self.endpoint):
            raise ValueError(
                f"the HTTP endpoint must be [host]:port (like :8080), not {self.endpoint!r}"
            )
        if self.endpoint and int(self.endpoint.rpartition(":")[2]) > 65535:
            raise ValueError(f"the HTTP endpoint's port is out of range: {self.endpoint!r}")
        if not self.metrics_path.startswith("/"):
            raise ValueError(f"the metrics path must start with /, not {self.metrics_path!r}")


@dataclasses.dataclass(frozen=True)
class WorkerSettings:
    provisioner: int = 100
    """`--worker-threads`: claims provisioned at once, and volumes deleted at once."""

    attacher: int = 10
    """`--worker-threads` (external-attacher's): attaches at once, and detaches at once."""

    def __post_init__(self) -> None:
        if min(self.provisioner, self.attacher) < 1:
            raise ValueError("worker counts must be at least 1")


@dataclasses.dataclass(frozen=True)
class CapacitySettings:
    enabled: bool = False
    """`--enable-capacity`: publish CSIStorageCapacity objects for the scheduler."""

    poll_interval: float = 60.0
    """`--capacity-poll-interval`: the wait between rounds of GetCapacity calls."""

    for_immediate_binding: bool = False
    """`--capacity-for-immediate-binding`: publish for Immediate classes too."""

    def __post_init__(self) -> None:
        _require_positive(self, "poll_interval")


@dataclasses.dataclass(frozen=True)
class Settings:
    csi: CSISettings = dataclasses.field(default_factory=CSISettings)
    kube: KubeSettings = dataclasses.field(default_factory=KubeSettings)
    provisioner: ProvisionerOptions = dataclasses.field(default_factory=ProvisionerOptions)
    workers: WorkerSettings = dataclasses.field(default_factory=WorkerSettings)
    capacity: CapacitySettings = dataclasses.field(default_factory=CapacitySettings)
    attacher: AttacherOptions = dataclasses.field(default_factory=AttacherOptions)
    health: HealthMonitorOptions = dataclasses.field(default_factory=HealthMonitorOptions)
    resizer: ResizerOptions = dataclasses.field(default_factory=ResizerOptions)
    snapshotter: SnapshotterOptions = dataclasses.field(default_factory=SnapshotterOptions)
    leader_election: LeaderElectionSettings = dataclasses.field(
        default_factory=LeaderElectionSettings
    )
    http: HTTPSettings = dataclasses.field(default_factory=HTTPSettings)
