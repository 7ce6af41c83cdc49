"""The provisioner's settings, named after external-provisioner's flags, with its defaults.

Frozen and validated once, so that the pure functions never meet a setting the Go sidecar would
have refused (or crashed on: a UUID length beyond 32 panics in Go). The lead wires these into
`kopf_csi.settings`; nothing here reads the environment.
"""

from __future__ import annotations

import dataclasses

from kopf_csi import names

__all__ = ["ProvisionerOptions"]

UUID_HEX_DIGITS = 32


@dataclasses.dataclass(frozen=True)
class ProvisionerOptions:
    volume_name_prefix: str = names.DEFAULT_VOLUME_NAME_PREFIX
    """`--volume-name-prefix`: the PV and CSI volume name is `<prefix>-<claim uid>`."""

    volume_name_uuid_length: int = -1
    """`--volume-name-uuid-length`: -1 keeps the UID whole; N strips dashes, keeps N chars."""

    default_fstype: str = ""
    """`--default-fstype`: used when the StorageClass names no fstype ("" = none)."""

    extra_create_metadata: bool = False
    """`--extra-create-metadata`: pass the PVC/PV names in the CreateVolume parameters."""

    strict_topology: bool = False
    """`--strict-topology`: with a selected node, ask only for that node's segment."""

    immediate_topology: bool = True
    """`--immediate-topology`: for Immediate binding, send the cluster's segments anyway."""

    controller_publish_readonly: bool = False
    """`--controller-publish-readonly`: a ROX-only claim gets `spec.csi.readOnly: true`."""

    prevent_volume_mode_conversion: bool = True
    """`--prevent-volume-mode-conversion`: a restore may change volumeMode only if allowed."""

    retry_interval_start: float = 1.0
    """`--retry-interval-start`: the first retry delay of a claim, in seconds."""

    retry_interval_max: float = 300.0
    """`--retry-interval-max`: the longest retry delay, and the infeasible slow-retry delay."""

    node_deployment: bool = False
    """`--node-deployment`: one provisioner per node, provisioning only for its own node."""

    node_name: str = ""
    """`$NODE_NAME`: this provisioner's node, with `node_deployment`."""

    node_deployment_immediate_binding: bool = True
    """`--node-deployment-immediate-binding`: also compete for Immediate claims."""

    node_deployment_base_delay: float = 20.0
    """`--node-deployment-base-delay`: the shortest wait before claiming an Immediate PVC."""

    node_deployment_max_delay: float = 60.0
    """`--node-deployment-max-delay`: the longest wait before claiming an Immediate PVC."""

    def __post_init__(self) -> None:
        if self.node_deployment and not self.node_name:
            raise ValueError("node deployment needs the node name (NODE_NAME)")
        if not self.volume_name_prefix:
            raise ValueError("volume name prefix cannot be of length 0")
        if not -1 <= self.volume_name_uuid_length <= UUID_HEX_DIGITS:
            raise ValueError(
                f"volume name UUID length must be -1 or 0..{UUID_HEX_DIGITS},"
                f" got {self.volume_name_uuid_length}"
            )
        if not 0 < self.retry_interval_start <= self.retry_interval_max:
            raise ValueError("retry intervals must satisfy 0 < start <= max")
