"""The CSI Identity service: the driver's name, its plugin capabilities, and readiness.

Readiness comes from the faults (`faults.set_ready(False)`, or `"ready": false` in the faults
file), so that a CO's start-up wait can be tested; it is True otherwise.
"""

from __future__ import annotations

from kopf_csi.csi import messages as csi
from kopf_csi.driver import capabilities
from kopf_csi.driver.backend import Backend

__all__ = ["IdentityServicer"]


class IdentityServicer(csi.IdentityBase):
    """Identity RPCs over one backend."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    async def get_plugin_info(self, message: csi.GetPluginInfoRequest) -> csi.GetPluginInfoResponse:
        config = self.backend.config
        return csi.GetPluginInfoResponse(
            name=config.name,
            vendor_version=config.vendor_version,
            manifest={"implementation": "kopf-csi reference hostpath driver"},
        )

    async def get_plugin_capabilities(
        self, message: csi.GetPluginCapabilitiesRequest
    ) -> csi.GetPluginCapabilitiesResponse:
        features = self.backend.config.features
        found = [
            csi.PluginCapability(
                service=csi.PluginCapabilityService(
                    csi.PluginCapabilityServiceType.from_string(name)
                )
            )
            for name in capabilities.plugin_services(features)
        ]
        found += [
            csi.PluginCapability(
                volume_expansion=csi.PluginCapabilityVolumeExpansion(
                    csi.PluginCapabilityVolumeExpansionType.from_string(name)
                )
            )
            for name in capabilities.volume_expansion(features)
        ]
        return csi.GetPluginCapabilitiesResponse(capabilities=found)

    async def probe(self, message: csi.ProbeRequest) -> csi.ProbeResponse:
        return csi.ProbeResponse(ready=self.backend.faults.ready)
