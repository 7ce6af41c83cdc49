"""The CreateVolume request for a claim, built in the order external-provisioner builds it.

Building the request is external-provisioner's `prepareProvision`, which interleaves checks with
reads (the source objects, the cluster's topology, the secret, the VolumeAttributesClass). The
pure parts are split around those reads:

1. `plan_request`: everything known from the claim, the class and the driver's capabilities: the
   data source and its kind, the capability checks, the selector, the name, the fstype, the
   size and the volume capabilities. Its errors are final, as in Go.
2. The caller then reads what the plan needs and resolves it with `sources`, `topology` and
   `secrets` (their failures leave the claim unchanged, or reschedule it).
3. `build_create_request`: the parameters, the extra metadata, the VolumeAttributesClass, and
   the request itself.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any, NoReturn

from kopf_csi.csi import messages as csi
from kopf_csi.provisioning import capabilities, parameters, sources
from kopf_csi.provisioning.errors import ProvisioningError
from kopf_csi.provisioning.naming import claim_volume_name
from kopf_csi.provisioning.options import ProvisionerOptions
from kopf_csi.provisioning.quantities import QuantityError, quantity_bytes
from kopf_csi.provisioning.states import ProvisioningState

__all__ = [
    "RequestPlan",
    "build_create_request",
    "check_driver_capabilities",
    "is_block",
    "mutable_parameters",
    "plan_request",
    "requested_bytes",
]

_FINISHED = ProvisioningState.FINISHED


@dataclasses.dataclass(frozen=True)
class RequestPlan:
    """What `prepareProvision` knows before its first read."""

    volume_name: str
    data_source: sources.DataSourceRef | None
    source_kind: sources.SourceKind | None
    volume_attributes_class: str
    """The claim's VolumeAttributesClass name, "" for none."""
    fs_type: str
    block: bool
    required_bytes: int
    volume_capabilities: tuple[csi.VolumeCapability, ...]


def check_driver_capabilities(
    *,
    plugin_capabilities: Iterable[str],
    controller_capabilities: Iterable[str],
    snapshot: bool = False,
    clone: bool = False,
    modify: bool = False,
) -> None:
    """The driver can provision at all, and can do what this claim needs (final if not)."""
    plugin, controller = set(plugin_capabilities), set(controller_capabilities)
    if "CONTROLLER_SERVICE" not in plugin:
        _unsupported("dynamic provisioning: plugin CONTROLLER_SERVICE")
    if "CREATE_DELETE_VOLUME" not in controller:
        _unsupported("dynamic provisioning: controller CREATE_DELETE_VOLUME")
    if snapshot and "CREATE_DELETE_SNAPSHOT" not in controller:
        _unsupported("snapshot restore: controller CREATE_DELETE_SNAPSHOT")
    if clone and "CLONE_VOLUME" not in controller:
        _unsupported("clone operations: controller CLONE_VOLUME")
    if modify and "MODIFY_VOLUME" not in controller:
        _unsupported("VolumeAttributesClass: controller MODIFY_VOLUME")


def _unsupported(what: str) -> NoReturn:
    message = f"CSI driver does not support {what} capability is not reported"
    raise ProvisioningError(message, state=_FINISHED)


def is_block(claim: Mapping[str, Any]) -> bool:
    """`volumeMode: Block` (anything else, or nothing, is a filesystem)."""
    return bool(claim.get("spec", {}).get("volumeMode") == "Block")


def requested_bytes(claim: Mapping[str, Any]) -> int:
    """`requests.storage` in bytes, exactly (0 if absent, as Go's zero Quantity)."""
    requests = (claim.get("spec", {}).get("resources") or {}).get("requests") or {}
    quantity = requests.get("storage")
    if quantity is None:
        return 0
    try:
        size = quantity_bytes(str(quantity))
    except QuantityError as exc:
        raise ProvisioningError(str(exc), state=_FINISHED) from None
    if size < 0:  # the API server refuses these; an unvalidated one must not reach the driver
        raise ProvisioningError(
            f"invalid storage request {quantity}: must be greater than or equal to 0",
            state=_FINISHED,
        )
    return size


def plan_request(
    claim: Mapping[str, Any],
    storage_class: Mapping[str, Any] | None,
    *,
    options: ProvisionerOptions,
    plugin_capabilities: Iterable[str],
    controller_capabilities: Iterable[str],
) -> RequestPlan:
    """Steps 1..10 of `prepareProvision`; raises `IgnoredError` for a populator's claim."""
    if storage_class is None:
        raise ProvisioningError("storage class was nil", state=_FINISHED)
    spec = claim.get("spec", {})
    ref = sources.data_source(claim)
    kind = sources.source_kind(ref, claim=claim) if ref is not None else None
    vac = spec.get("volumeAttributesClassName") or ""
    controller_capabilities = set(controller_capabilities)
    check_driver_capabilities(
        plugin_capabilities=plugin_capabilities,
        controller_capabilities=controller_capabilities,
        snapshot=kind is sources.SourceKind.SNAPSHOT,
        clone=kind is sources.SourceKind.CLONE,
        modify=bool(vac),
    )
    if spec.get("selector") is not None:
        raise ProvisioningError("claim Selector is not supported", state=_FINISHED)
    name = claim_volume_name(
        claim, prefix=options.volume_name_prefix, uuid_length=options.volume_name_uuid_length
    )
    fs_type = parameters.fs_type(storage_class.get("parameters"), default=options.default_fstype)
    size = requested_bytes(claim)
    try:
        caps = capabilities.volume_capabilities(
            access_modes=spec.get("accessModes") or (),
            block=is_block(claim),
            fs_type=fs_type,
            mount_flags=storage_class.get("mountOptions") or (),
            single_node_multi_writer="SINGLE_NODE_MULTI_WRITER" in controller_capabilities,
        )
    except capabilities.AccessModeError as exc:
        raise ProvisioningError(str(exc), state=_FINISHED) from None
    return RequestPlan(
        volume_name=name,
        data_source=ref,
        source_kind=kind,
        volume_attributes_class=vac,
        fs_type=fs_type,
        block=is_block(claim),
        required_bytes=size,
        volume_capabilities=tuple(caps),
    )


def mutable_parameters(
    volume_attributes_class: Mapping[str, Any], *, name: str, driver_name: str
) -> dict[str, str]:
    """The VolumeAttributesClass's parameters, if it is for our driver (final error if not)."""
    vac_driver = volume_attributes_class.get("driverName", "")
    if vac_driver != driver_name:
        raise ProvisioningError(
            f"VAC {name} referenced in PVC is for driver {vac_driver} which does not match"
            f" driver name {driver_name}",
            state=_FINISHED,
        )
    return dict(volume_attributes_class.get("parameters") or {})


def build_create_request(
    plan: RequestPlan,
    *,
    claim: Mapping[str, Any],
    storage_class: Mapping[str, Any],
    options: ProvisionerOptions,
    driver_name: str,
    secrets: Mapping[str, str] | None = None,
    content_source: csi.VolumeContentSource | None = None,
    accessibility_requirements: csi.TopologyRequirement | None = None,
    volume_attributes_class: Mapping[str, Any] | None = None,
) -> csi.CreateVolumeRequest:
    """The request (steps 17..19 of `prepareProvision`), from the plan and what was read.

    `secrets` is the provisioner secret's data, decoded; `volume_attributes_class` the object
    named by `plan.volume_attributes_class` (required when that is set).
    """
    driver_params = parameters.driver_parameters(storage_class.get("parameters"))
    if options.extra_create_metadata:
        driver_params = parameters.with_create_metadata(
            driver_params, claim=claim, volume_name=plan.volume_name
        )
    mutable: dict[str, str] = {}
    if plan.volume_attributes_class:
        if volume_attributes_class is None:
            raise ValueError("the claim's VolumeAttributesClass must be read first")
        mutable = mutable_parameters(
            volume_attributes_class, name=plan.volume_attributes_class, driver_name=driver_name
        )
    return csi.CreateVolumeRequest(
        name=plan.volume_name,
        capacity_range=csi.CapacityRange(required_bytes=plan.required_bytes),
        volume_capabilities=list(plan.volume_capabilities),
        parameters=driver_params,
        secrets=dict(secrets or {}),
        volume_content_source=content_source,
        accessibility_requirements=accessibility_requirements,
        mutable_parameters=mutable,
    )
