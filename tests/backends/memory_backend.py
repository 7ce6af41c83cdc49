"""A provisioner back end that keeps its volumes in memory, scripted by `tests.backends.state`.

It implements every optional interface: `should_provision` (claims labelled `skip` are not
its), `should_delete` (PVs labelled `keep` are kept) and `supports_block`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import kopf

from kopf_csi.provisioning.backends import ProvisionOptions, ProvisionResult, register_provisioner
from tests.backends import state

NAME = "example.com/memory"


class MemoryBackend:
    def should_provision(self, claim: Mapping[str, Any]) -> bool:
        return "skip" not in (claim["metadata"].get("labels") or {})

    def should_delete(self, volume: Mapping[str, Any]) -> bool:
        return "keep" not in (volume["metadata"].get("labels") or {})

    def supports_block(self) -> bool:
        return True

    async def provision(self, options: ProvisionOptions) -> ProvisionResult:
        script = state.SCRIPT.get(options.claim["metadata"]["name"]) or []
        if script:
            step = script.pop(0)
            if isinstance(step, BaseException):
                raise step
            assert isinstance(step, ProvisionResult)
            return step
        if options.volume_name not in state.MADE:
            state.MADE[options.volume_name] = 0
        state.MADE[options.volume_name] += 1
        labels = options.claim["metadata"].get("labels") or {}
        return ProvisionResult.volume_source(
            {"nfs": {"server": "memory", "path": f"/{options.volume_name}"}}, labels=labels
        )

    async def delete(self, volume: Mapping[str, Any]) -> None:
        name = volume["metadata"]["name"]
        script = state.DELETE_SCRIPT.get(name) or []
        if script:
            raise script.pop(0)
        state.DELETED.append(name)


@kopf.on.startup(id="tests.memory_backend")
async def register(memo: kopf.Memo, **_: Any) -> None:
    register_provisioner(memo, name=NAME, provisioner=MemoryBackend(), manager="memory-provisioner")
