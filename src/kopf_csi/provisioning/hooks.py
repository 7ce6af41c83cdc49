"""Extension point: users' handler modules look at (and change) each CreateVolumeRequest.

A hook is `async def hook(claim, storage_class, request) -> None`. It runs after the request is
built from the claim and its class and before anything is recorded or sent to the driver, so it
may:

- change `request.parameters` (add keys, for example from the claim's labels);
- refuse the claim with `Refused("why")`: the claim gets a `ProvisioningFailed` event with that
  text and is retried with the usual backoff, as for any other failed attempt. Nothing has been
  created, so nothing can leak.

Hooks run in the order they were added, for every attempt. A hook that raises anything else is
a bug in that hook: the attempt fails the same way, with the hook named in the event, and the
operator goes on serving other claims.

Handler modules add hooks through the memo, in any order relative to the provisioner's start:

    @kopf.on.startup()
    async def register(memo: kopf.Memo, **_: Any) -> None:
        create_volume_hooks(memo).append(my_hook)
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, MutableMapping, Sequence
from typing import Any

from kopf_csi.csi import messages as csi
from kopf_csi.provisioning.errors import ProvisioningError
from kopf_csi.provisioning.states import ProvisioningState

__all__ = ["CreateVolumeHook", "Refused", "create_volume_hooks", "run_hooks"]

CreateVolumeHook = Callable[
    [Mapping[str, Any], Mapping[str, Any], csi.CreateVolumeRequest], Awaitable[None]
]

MEMO_KEY = "create_volume_hooks"


class Refused(ProvisioningError):
    """A hook will not let this claim be provisioned now; the message goes into the event."""

    def __init__(self, message: str) -> None:
        super().__init__(message, state=ProvisioningState.FINISHED)


def create_volume_hooks(memo: MutableMapping[str, Any]) -> list[CreateVolumeHook]:
    """The one list of hooks in this operator's memo (created by whoever asks first)."""
    hooks: list[CreateVolumeHook] = memo.setdefault(MEMO_KEY, [])
    return hooks


async def run_hooks(
    hooks: Sequence[CreateVolumeHook],
    claim: Mapping[str, Any],
    storage_class: Mapping[str, Any],
    request: csi.CreateVolumeRequest,
) -> None:
    for hook in hooks:
        try:
            await hook(claim, storage_class, request)
        except ProvisioningError:
            raise
        except Exception as exc:
            name = getattr(hook, "__qualname__", repr(hook))
            raise ProvisioningError(
                f"create-volume hook {name} failed: {type(exc).__name__}: {exc}",
                state=ProvisioningState.FINISHED,
            ) from exc
