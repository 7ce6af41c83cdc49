"""What a CreateVolume hook gets besides the claim, its class and the request: `context`.

A hook that takes a `context` keyword argument gets a `HookContext`: the operator's Kubernetes
client (`context.api`), and the holds a quota needs under concurrency (`context.reserve`,
`kopf_csi.provisioning.reservations`). A hook without it is called as before, with three
arguments; nothing needs to be kept from a start-up handler's `memo`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Mapping
from typing import Any, Protocol

from kopf_csi import kube
from kopf_csi.csi import messages as csi
from kopf_csi.provisioning.hooks import Refused
from kopf_csi.provisioning.reservations import Reservations

__all__ = ["ContextHook", "HookContext", "OverBudget"]


class OverBudget(Refused):
    """`context.reserve` found no room: the claim is refused (a `ProvisioningFailed` event with
    this text) and retried with its backoff, as for any `Refused`."""

    def __init__(self, key: str, amount: int, *, limit: int, used: int) -> None:
        super().__init__(
            f"{key}: {amount} more would pass the limit of {limit} ({used} in use or reserved)"
        )
        self.key, self.amount, self.limit, self.used = key, amount, limit, used


@dataclasses.dataclass(frozen=True)
class HookContext:
    """One attempt's context for a CreateVolume hook (see the module)."""

    api: kube.KubeClient
    """The operator's Kubernetes client, writing as the provisioner (`as_manager` for your
    own name): `await context.api.get(kopf_csi.api.CONFIGMAPS, name, namespace)`."""
    claim: Mapping[str, Any]
    """The claim being provisioned (as the hook's first argument)."""
    reservations: Reservations
    """The operator's holds, every hook's and every claim's (`reserve` is the usual way)."""

    def reserve(
        self, key: str, amount: int, *, limit: int, counted: Mapping[str, int] | None = None
    ) -> None:
        """Hold `amount` under `key` (a namespace, a team) for this claim, or raise
        `OverBudget`: checked and held in one step, so that concurrent attempts cannot all
        fit on their own and pass the limit together.

        `counted` adds what the hook counted itself, by claim uid (the claims bound already,
        from a list: after a restart the holds are gone); a claim held and counted counts once.
        The hold lasts until this attempt fails with nothing on the driver (a later hook
        refuses it, CreateVolume fails) or the claim is deleted; a provisioned claim keeps it.
        """
        uid = str(self.claim.get("metadata", {}).get("uid", ""))
        used = self.reservations.hold(key, uid, amount, limit=limit, counted=counted)
        if used is not None:
            raise OverBudget(key, amount, limit=limit, used=used)

    def held(self, key: str) -> int:
        """The total held under `key` now, by every claim."""
        return sum(self.reservations.held(key).values())


class ContextHook(Protocol):
    """A hook that takes the context: `async def hook(claim, storage_class, request, *,
    context)` (or a plain `def`, run in a thread)."""

    def __call__(
        self,
        claim: Mapping[str, Any],
        storage_class: Mapping[str, Any],
        request: csi.CreateVolumeRequest,
        *,
        context: HookContext,
    ) -> Awaitable[None] | None: ...
