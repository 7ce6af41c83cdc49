"""The hostdir example, held after it made the directory: a provisioning attempt in flight.

Loaded instead of `kopf_csi_handlers.examples.hostdir_provisioner` by the restart tests. The
call log lives in `tests.examples.gate` (not reloaded with this module by each operator).
"""

from __future__ import annotations

import asyncio
from typing import Any

import kopf

from kopf_csi import runtime
from kopf_csi.provisioning.backends import ProvisionOptions, ProvisionResult, register_provisioner
from kopf_csi_handlers.examples.hostdir_provisioner import NAME, HostDirProvisioner
from tests.examples import gate


class GatedHostDir(HostDirProvisioner):
    async def provision(self, options: ProvisionOptions) -> ProvisionResult:
        result = await super().provision(options)
        gate.CALLS.append(options.volume_name)
        await asyncio.Event().wait()  # never set: cancelled here when the operator stops
        return result


@kopf.on.startup(id="tests.gated_hostdir")
async def register(memo: kopf.Memo, **_: Any) -> None:
    node = runtime.settings_from_memo(memo).provisioner.node_name
    register_provisioner(memo, name=NAME, provisioner=GatedHostDir(node_name=node))
