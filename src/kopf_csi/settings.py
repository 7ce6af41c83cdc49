"""The operator's settings: frozen, grouped, each field documented where it is declared.

Names follow the Go sidecars' flags (`--csi-address` → `csi.address`, `--timeout` →
`csi.timeout`). Settings are parsed once, by an entry point, and handed to the handlers through
kopf's memo; nothing else reads the environment. `from_env()` is the fallback used when the
handler modules run under a bare `kopf run`.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
from collections.abc import Mapping

from kopf_csi.attaching.options import AttacherOptions, HealthMonitorOptions
from kopf_csi.provisioning.options import ProvisionerOptions

__all__ = [
    "AttacherOptions",
    "CSISettings",
    "CapacitySettings",
    "HTTPSettings",
    "HealthMonitorOptions",
    "KubeSettings",
    "LeaderElectionSettings",
    "ProvisionerOptions",
    "Settings",
    "SettingsError",
    "WorkerSettings",
]


class SettingsError(ValueError):
    """A setting has a value we cannot use; the message names the setting and the value."""


@dataclasses.dataclass(frozen=True)
class CSISettings:
    address: str = "/run/csi/socket"
    """The driver's socket: `--csi-address` (a bare path or `unix://...`)."""

    timeout: float = 10.0
    """Seconds allowed for each CSI call: `--timeout` (external-provisioner's code default)."""

    connect_timeout: float = 30.0
    """Seconds to wait at start-up for the driver to answer Probe with ready (csi-lib-utils)."""


@dataclasses.dataclass(frozen=True)
class KubeSettings:
    kubeconfig: pathlib.Path | None = None
    """`--kubeconfig`; empty means in-cluster, then the usual kubeconfig locations."""

    namespace: str = "default"
    """The operator's own namespace (`$POD_NAMESPACE`): its Lease and in-flight journal."""

    qps: float = 100.0
    """`--kube-api-qps`: our own API requests per second (the Go default, 5, caps provisioning
    near 2 volumes/s; drivers raise it, so the default here is higher)."""

    burst: int = 200
    """`--kube-api-burst`: requests allowed at once above `qps` (Go: 10)."""


@dataclasses.dataclass(frozen=True)
class LeaderElectionSettings:
    enabled: bool = False
    """`--leader-election`: run active/passive; only the holder of the Leases works."""

    namespace: str | None = None
    """`--leader-election-namespace`; empty means the operator's own namespace."""

    lease_duration: float = 15.0
    """`--leader-election-lease-duration`: seconds a Lease is valid without renewal (15s)."""

    renew_deadline: float = 10.0
    """`--leader-election-renew-deadline`: seconds the leader keeps trying to renew (10s)."""

    retry_period: float = 5.0
    """`--leader-election-retry-period`: seconds between attempts to acquire or renew (5s)."""

    identity: str = ""
    """This replica's name in the Lease's holderIdentity; empty means the host name."""


@dataclasses.dataclass(frozen=True)
class HTTPSettings:
    endpoint: str = ""
    """`--http-endpoint` (`:8080`, `0.0.0.0:8080`): metrics and health; empty means off."""

    metrics_path: str = "/metrics"
    """`--metrics-path`: where Prometheus scrapes the metrics on that endpoint."""


@dataclasses.dataclass(frozen=True)
class WorkerSettings:
    provisioner: int = 100
    """Claims provisioned at once, and volumes deleted at once: `--worker-threads` (100)."""

    attacher: int = 10
    """external-attacher's `--worker-threads` (10): attaches at once, and detaches at once."""


@dataclasses.dataclass(frozen=True)
class CapacitySettings:
    enabled: bool = False
    """`--enable-capacity`: publish CSIStorageCapacity objects for the scheduler."""

    poll_interval: float = 60.0
    """`--capacity-poll-interval`: seconds between GetCapacity rounds (1m)."""

    for_immediate_binding: bool = False
    """`--capacity-for-immediate-binding`: publish for Immediate classes too."""


@dataclasses.dataclass(frozen=True)
class Settings:
    csi: CSISettings = dataclasses.field(default_factory=CSISettings)
    kube: KubeSettings = dataclasses.field(default_factory=KubeSettings)
    provisioner: ProvisionerOptions = dataclasses.field(default_factory=ProvisionerOptions)
    workers: WorkerSettings = dataclasses.field(default_factory=WorkerSettings)
    capacity: CapacitySettings = dataclasses.field(default_factory=CapacitySettings)
    attacher: AttacherOptions = dataclasses.field(default_factory=AttacherOptions)
    health: HealthMonitorOptions = dataclasses.field(default_factory=HealthMonitorOptions)
    leader_election: LeaderElectionSettings = dataclasses.field(
        default_factory=LeaderElectionSettings
    )
    http: HTTPSettings = dataclasses.field(default_factory=HTTPSettings)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read `CSI_ADDRESS`, `CSI_TIMEOUT`, `CSI_CONNECT_TIMEOUT` and `KUBECONFIG`."""
        env = os.environ if env is None else env
        csi = CSISettings(
            address=env.get("CSI_ADDRESS") or CSISettings.address,
            timeout=_seconds(env, "CSI_TIMEOUT", CSISettings.timeout),
            connect_timeout=_seconds(env, "CSI_CONNECT_TIMEOUT", CSISettings.connect_timeout),
        )
        kubeconfig = env.get("KUBECONFIG")
        kube = KubeSettings(
            kubeconfig=pathlib.Path(kubeconfig) if kubeconfig else None,
            namespace=env.get("POD_NAMESPACE") or KubeSettings.namespace,
        )
        node_name = env.get("NODE_NAME", "")
        try:
            provisioner = ProvisionerOptions(
                node_deployment=_flag(env, "NODE_DEPLOYMENT"), node_name=node_name
            )
        except ValueError as exc:
            raise SettingsError(str(exc)) from None
        return cls(csi=csi, kube=kube, provisioner=provisioner)


def _flag(env: Mapping[str, str], name: str) -> bool:
    raw = (env.get(name) or "").strip().lower()
    if raw in ("", "0", "false", "no", "off"):
        return False
    if raw in ("1", "true", "yes", "on"):
        return True
    raise SettingsError(f"{name}={env[name]!r} is not a boolean (true or false)")


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if not raw:
        return default
    text = raw.strip().removesuffix("s")
    try:
        value = float(text)
    except ValueError:
        raise SettingsError(f"{name}={raw!r} is not a duration in seconds (10 or 10s)") from None
    if value <= 0:
        raise SettingsError(f"{name}={raw!r} must be more than zero")
    return value
