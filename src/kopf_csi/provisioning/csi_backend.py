"""The CSI driver as a provisioner back end: external-provisioner's `Provision` and `Delete`.

One implementation of `backends.ProvisionerBackend`, built by the controller itself when it has
a CSI driver. `provision` plans and builds the CreateVolumeRequest (data source protection first,
then the secrets, the selected node, the topology, the VolumeAttributesClass, the users' hooks),
records the claim in the in-flight journal, calls CreateVolume, checks the answer and builds the
PV field for field as the Go sidecar does. A gRPC failure becomes a failed result with the
state of external-provisioner's `checkError`. `delete` is DeleteVolume with the deletion secret,
never while a VolumeAttachment still names the PV.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import structlog

from kopf_csi import kube
from kopf_csi.caches import Caches
from kopf_csi.csi import CSIClient, CSIError, DriverInfo
from kopf_csi.csi import messages as csi
from kopf_csi.provisioning import decisions, deletions, requests, secrets, topology
from kopf_csi.provisioning.access import meta as meta_of
from kopf_csi.provisioning.access import read_secret_data
from kopf_csi.provisioning.access import uid as uid_of
from kopf_csi.provisioning.backends import ProvisionOptions, ProvisionResult
from kopf_csi.provisioning.errors import ProvisioningError
from kopf_csi.provisioning.hookcalls import run_hooks
from kopf_csi.provisioning.hookcontext import HookContext
from kopf_csi.provisioning.hooks import CreateVolumeHook
from kopf_csi.provisioning.options import ProvisionerOptions
from kopf_csi.provisioning.reservations import Reservations
from kopf_csi.provisioning.sourcing import Sources
from kopf_csi.provisioning.states import (
    ProvisioningState,
    error_text,
    is_infeasible,
    state_for,
)
from kopf_csi.provisioning.volumes import build_volume, response_problem

__all__ = ["CSIBackend"]

log = structlog.get_logger("kopf_csi.provisioning")
Body = Mapping[str, Any]


class CSIBackend:
    """CreateVolume and DeleteVolume on the driver, for the provisioning controller."""

    def __init__(
        self,
        *,
        csi_client: CSIClient,
        api: kube.KubeClient,
        caches: Caches,
        driver: DriverInfo,
        options: ProvisionerOptions,
        identity: str,
        sources: Sources,
        hooks: Sequence[CreateVolumeHook],
        topology_memos: dict[str, topology.TopologyMemo],
        record: Callable[[Body], Awaitable[None]],
        reservations: Reservations,
    ) -> None:
        self.csi = csi_client
        self.api = api
        self.caches = caches
        self.driver = driver
        self.options = options
        self.identity = identity
        self.sources = sources
        self.hooks = hooks
        self.topology_memos = topology_memos
        """The controller's: forgotten with the claim, or when it is rescheduled."""
        self.record = record
        """Writes the claim into the in-flight journal, just before CreateVolume."""
        self.reservations = reservations
        """The hooks' holds (`context.reserve`): the controller releases them."""
        self.supports_topology = topology.supports_topology(driver.plugin_capabilities)

    def supports_block(self) -> bool:
        return True  # the driver's capabilities decide, at ValidateVolumeCapabilities time

    async def provision(self, options: ProvisionOptions) -> ProvisionResult:
        claim = options.claim
        try:
            volume = await self._provision(claim, options.storage_class)
        except CSIError as exc:
            may_reschedule = decisions.may_reschedule(
                supports_topology=self.supports_topology,
                selected_node=decisions.selected_node(claim),
            )
            state = state_for(exc, may_reschedule=may_reschedule)
            return ProvisionResult.failed(
                error_text(exc), state=state, infeasible=is_infeasible(exc)
            )
        return ProvisionResult.persistent_volume(volume)

    async def _provision(self, claim: Body, storage_class: Body) -> dict[str, Any]:
        plan = requests.plan_request(
            claim,
            storage_class,
            options=self.options,
            plugin_capabilities=self.driver.plugin_capabilities,
            controller_capabilities=self.driver.controller_capabilities,
        )
        # The data source is protected first, before anything else can fail (a missing secret,
        # a missing CSINode): a claim that waits and retries keeps its source (Go's order).
        content_source = await self.sources.content_source(claim, plan, storage_class)
        parameters = storage_class.get("parameters")
        refs = secrets.secret_references(parameters, volume_name=plan.volume_name, claim=claim)
        secret_data = await read_secret_data(self.api, refs.provisioner, required=True)
        self._check_selected_node(claim)
        requirement = await self._accessibility(claim, storage_class)
        vac = await self._volume_attributes_class(plan.volume_attributes_class)
        request = requests.build_create_request(
            plan,
            claim=claim,
            storage_class=storage_class,
            options=self.options,
            driver_name=self.driver.name,
            secrets=secret_data,
            content_source=content_source,
            accessibility_requirements=requirement,
            volume_attributes_class=vac,
        )
        context = HookContext(api=self.api, claim=claim, reservations=self.reservations)
        await run_hooks(
            self.hooks, claim, storage_class, request, timeout=self.csi.timeout, context=context
        )
        await self.record(claim)
        response = await self.csi.create_volume(request)
        if response.volume is None:
            raise ProvisioningError(
                "CreateVolume returned no volume", state=ProvisioningState.IN_BACKGROUND
            )
        problem = response_problem(
            response.volume,
            claim=claim,
            required_bytes=plan.required_bytes,
            requirement=requirement,
        )
        if problem is not None:
            cleanup_error = None
            if problem.deletable:
                cleanup_error = await self._clean_up(response.volume, secret_data, problem.message)
            else:
                log.warning("volume_rejected", reason=problem.message)
            raise problem.error(volume_name=plan.volume_name, cleanup_error=cleanup_error)
        return build_volume(
            claim=claim,
            storage_class=storage_class,
            plan=plan,
            volume=response.volume,
            secrets=refs,
            driver_name=self.driver.name,
            identity=self.identity,
            options=self.options,
            supports_topology=self.supports_topology,
        )

    def _check_selected_node(self, claim: Body) -> None:
        """A selected node that does not exist reschedules the claim.

        With topology, the selected node's CSINode is what is looked up (the Go provisioner's
        "failed to get selected CSINode" comes from `_accessibility`). Without it, the Node.
        Either way after the Normal `Provisioning` event, as on a real cluster.
        """
        node_name = decisions.selected_node(claim)
        if self.supports_topology or node_name is None:
            return
        if self.caches.nodes.get(node_name) is None:
            raise decisions.missing_node_error(node_name)

    async def _clean_up(
        self, volume: csi.Volume, secret_data: Mapping[str, str], why: str
    ) -> str | None:
        """Delete a volume the driver answered wrongly about; the error text if that failed."""
        log.warning("volume_rejected", volume_id=volume.volume_id, reason=why)
        request = csi.DeleteVolumeRequest(volume_id=volume.volume_id, secrets=dict(secret_data))
        try:
            await self.csi.delete_volume(request)
        except CSIError as exc:
            log.warning("volume_cleanup_failed", volume_id=volume.volume_id, error=str(exc))
            return error_text(exc)
        return None

    async def _accessibility(
        self, claim: Body, storage_class: Body
    ) -> csi.TopologyRequirement | None:
        if not self.supports_topology:
            return None
        uid = uid_of(claim)
        result = topology.accessibility_requirements(
            driver_name=self.driver.name,
            claim_name=meta_of(claim).get("name", ""),
            allowed_topologies=storage_class.get("allowedTopologies"),
            selected_node=decisions.selected_node(claim) or "",
            strict_topology=self.options.strict_topology,
            immediate_topology=self.options.immediate_topology,
            csinodes=list(self.caches.csinodes),
            nodes=list(self.caches.nodes),
            memo=self.topology_memos.get(uid),
        )
        self.topology_memos[uid] = result.memo
        return result.requirement

    async def _volume_attributes_class(self, name: str) -> Body | None:
        if not name:
            return None
        try:
            return await self.api.read(kube.VOLUME_ATTRIBUTES_CLASSES, name)
        except kube.NotFoundError as exc:  # Go returns the Get's error as it is
            raise ProvisioningError(exc.message, state=ProvisioningState.NO_CHANGE) from None

    async def delete(self, volume: Body) -> None:
        """DeleteVolume, unless a VolumeAttachment still uses the PV (upstream #438)."""
        if self.driver.has_controller("PUBLISH_UNPUBLISH_VOLUME"):
            attachments = self.caches.attachments.indexed(volume["metadata"]["name"])
            blocker = deletions.blocking_attachment(volume, attachments=attachments)
            if blocker is not None:
                raise deletions.VolumeInUseError(blocker)
        class_name = volume.get("spec", {}).get("storageClassName") or ""
        storage_class = self.caches.storage_classes.get(class_name)
        try:
            ref = secrets.deletion_secret_reference(volume, storage_class=storage_class)
        except (secrets.SecretReferenceError, ProvisioningError) as exc:
            raise deletions.DeletionError(str(exc)) from exc
        secret_data = await read_secret_data(self.api, ref, required=False)
        request = deletions.delete_request(
            volume,
            secrets=secret_data,
            plugin_capabilities=self.driver.plugin_capabilities,
            controller_capabilities=self.driver.controller_capabilities,
        )
        await self.csi.delete_volume(request)
        log.info("volume_deleted")
