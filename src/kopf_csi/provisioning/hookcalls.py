"""Running the users' CreateVolume hooks (`kopf_csi.provisioning.hooks`) for one attempt.

In the order they were added; a plain `def` in a thread, as kopf runs a sync handler; a
`ProvisioningError` (`Refused`) as it is; anything else is the hook's own bug: its traceback is
logged (`create_volume_hook_failed`) and the attempt fails with an event that names the hook.
An `async def` hook gets the CSI call's timeout (`--timeout`) to return: one that hangs fails
the attempt (retried with the claim's backoff) instead of holding its claim for ever. A plain
`def` runs to its end: nothing can stop a thread, and one left running at every retry would
take the default executor's few threads (kopf's and our sync handlers' too), one by one.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Mapping, Sequence
from typing import Any

import structlog

from kopf_csi.csi import messages as csi
from kopf_csi.provisioning.errors import ProvisioningError
from kopf_csi.provisioning.hookcontext import HookContext
from kopf_csi.provisioning.hooks import CreateVolumeHook
from kopf_csi.provisioning.states import ProvisioningState

__all__ = ["run_hooks"]

log = structlog.get_logger("kopf_csi.provisioning")


async def run_hooks(
    hooks: Sequence[CreateVolumeHook],
    claim: Mapping[str, Any],
    storage_class: Mapping[str, Any],
    request: csi.CreateVolumeRequest,
    *,
    timeout: float | None = None,
    context: HookContext | None = None,
) -> None:
    for hook in hooks:
        name = getattr(hook, "__qualname__", repr(hook))
        deadline = asyncio.timeout(timeout if inspect.iscoroutinefunction(hook) else None)
        try:
            async with deadline:
                await _call(hook, claim, storage_class, request, context)
        except ProvisioningError:
            raise
        except TimeoutError as exc:
            if not deadline.expired():
                raise _failed(name, exc) from exc  # the hook's own TimeoutError
            log.warning("create_volume_hook_timed_out", hook=name, timeout=timeout)
            raise ProvisioningError(
                f"create-volume hook {name} did not return within {timeout:g}s",
                state=ProvisioningState.FINISHED,
            ) from None
        except Exception as exc:
            raise _failed(name, exc) from exc


def _takes_context(hook: CreateVolumeHook) -> bool:
    """The hook takes `context` (by name, or in its `**kwargs`): the three-argument hooks of
    before are called as they were."""
    try:
        parameters = inspect.signature(hook).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: the old call
        return False
    return any(p.name == "context" or p.kind is p.VAR_KEYWORD for p in parameters)


def _failed(name: str, exc: Exception) -> ProvisioningError:
    """A hook's own bug (called while handling it): its traceback logged, the attempt failed
    naming the hook."""
    log.exception("create_volume_hook_failed", hook=name, error=str(exc) or repr(exc))
    return ProvisioningError(
        f"create-volume hook {name} failed: {type(exc).__name__}: {exc}",
        state=ProvisioningState.FINISHED,
    )


async def _call(
    hook: CreateVolumeHook,
    claim: Mapping[str, Any],
    storage_class: Mapping[str, Any],
    request: csi.CreateVolumeRequest,
    context: HookContext | None,
) -> None:
    kwargs = {"context": context} if context is not None and _takes_context(hook) else {}
    if inspect.iscoroutinefunction(hook):
        await hook(claim, storage_class, request, **kwargs)
        return
    result = await asyncio.to_thread(hook, claim, storage_class, request, **kwargs)  # as kopf
    if inspect.isawaitable(result):  # a callable object, a partial: whatever it gives back
        await result
