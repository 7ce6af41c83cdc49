"""Extension point: users' handler modules look at (and change) each CreateVolumeRequest.

A hook is `async def hook(claim, storage_class, request) -> None` (a plain `def` runs in a
thread, as kopf runs a sync handler). It runs after the request is built from the claim and its
class and before anything is recorded or sent to the driver, so it may:

- change `request.parameters` (add keys, for example from the claim's labels);
- refuse the claim with `Refused("why")`: the claim gets a `ProvisioningFailed` event with that
  text and is retried with the usual backoff, as for any other failed attempt. Nothing has been
  created, so nothing can leak.

Hooks run in the order they were added, for every attempt. A hook that raises anything else is
a bug in that hook: the attempt fails the same way, with the hook and the exception named in the
event, its traceback is logged (`create_volume_hook_failed`), and the operator goes on serving
other claims.

The provisioner runs them (`hookcalls.run_hooks`). Handler modules add hooks through the memo,
in any order relative to the provisioner's start:

    @kopf.on.startup()
    async def register(memo: kopf.Memo, **_: Any) -> None:
        create_volume_hooks(memo).append(my_hook)
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any

from kopf_csi.csi import messages as csi
from kopf_csi.provisioning.errors import ProvisioningError
from kopf_csi.provisioning.states import ProvisioningState

__all__ = ["CreateVolumeHook", "Refused", "create_volume_hooks"]

CreateVolumeHook = Callable[
    [Mapping[str, Any], Mapping[str, Any], csi.CreateVolumeRequest], Awaitable[None] | None
]
"""An async function, or a plain one (it runs in a thread)."""

MEMO_KEY = "create_volume_hooks"


class Refused(ProvisioningError):
    """A hook will not let this claim be provisioned now; the message goes into the event."""

    def __init__(self, message: str) -> None:
        super().__init__(message, state=ProvisioningState.FINISHED)


def create_volume_hooks(memo: MutableMapping[str, Any]) -> list[CreateVolumeHook]:
    """The one list of hooks in this operator's memo (created by whoever asks first)."""
    hooks: list[CreateVolumeHook] = memo.setdefault(MEMO_KEY, [])
    return hooks
