"""Extension point: users' handler modules look at (and change) each CreateVolumeRequest.

A hook is `async def hook(claim, storage_class, request) -> None` (a plain `def` runs in a
thread, as kopf runs a sync handler). A hook that also takes a keyword `context` gets the
attempt's `hookcontext.HookContext`: the Kubernetes client, and holds for quotas. It runs
after the request is built from the claim and its class and before anything is recorded or
sent to the driver, so it may:

- change `request.parameters` (add keys, for example from the claim's labels);
- refuse the claim with `Refused("why")`: the claim gets a `ProvisioningFailed` event with that
  text and is retried with the usual backoff, as for any other failed attempt. Nothing has been
  created, so nothing can leak.

Hooks run in the order they were added, for every attempt. Attempts of different claims run
concurrently (up to `--worker-threads`), each claim's one at a time: two hooks may run at
once for two claims of one namespace. A quota reserves with `context.reserve`.

A hook that raises anything else than `Refused` is a bug in that hook: the attempt fails the
same way, with the hook and the exception named in the event, its traceback is logged
(`create_volume_hook_failed`), and the operator goes on serving other claims.

The provisioner runs them (`hookcalls.run_hooks`). Handler modules add hooks through the memo,
in any order relative to the provisioner's start:

    @kopf.on.startup()
    async def register(memo: kopf.Memo, **_: Any) -> None:
        create_volume_hooks(memo).append(my_hook)
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from kopf_csi.provisioning.errors import ProvisioningError
from kopf_csi.provisioning.states import ProvisioningState

__all__ = ["CreateVolumeHook", "Refused", "create_volume_hooks"]

CreateVolumeHook = Callable[..., Awaitable[None] | None]
"""An async function, or a plain one (it runs in a thread): `(claim, storage_class, request)`,
and `context=` if it takes that keyword (`hookcontext.ContextHook`)."""

MEMO_KEY = "create_volume_hooks"


class Refused(ProvisioningError):
    """A hook will not let this claim be provisioned now; the message goes into the event."""

    def __init__(self, message: str) -> None:
        super().__init__(message, state=ProvisioningState.FINISHED)


def create_volume_hooks(memo: MutableMapping[str, Any]) -> list[CreateVolumeHook]:
    """The one list of hooks in this operator's memo (created by whoever asks first)."""
    hooks: list[CreateVolumeHook] = memo.setdefault(MEMO_KEY, [])
    return hooks
