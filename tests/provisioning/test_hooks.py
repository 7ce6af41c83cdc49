"""The CreateVolume hooks: the order they run in, refusals, and a hook's own bugs."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
import structlog

from kopf_csi.csi import messages as csi
from kopf_csi.provisioning.errors import ProvisioningError
from kopf_csi.provisioning.hookcalls import run_hooks
from kopf_csi.provisioning.hooks import Refused, create_volume_hooks
from kopf_csi.provisioning.states import ProvisioningState


def test_the_memo_holds_one_list_whoever_asks_first() -> None:
    memo: dict[str, Any] = {}
    first = create_volume_hooks(memo)
    assert create_volume_hooks(memo) is first
    assert first == []


async def test_hooks_run_in_order_and_may_change_parameters() -> None:
    seen: list[str] = []

    async def one(claim: Any, sc: Any, request: csi.CreateVolumeRequest) -> None:
        seen.append("one")
        request.parameters["a"] = "1"

    async def two(claim: Any, sc: Any, request: csi.CreateVolumeRequest) -> None:
        seen.append(f"two:{request.parameters['a']}")

    request = csi.CreateVolumeRequest(name="pvc-1", parameters={})
    await run_hooks([one, two], {}, {}, request)
    assert seen == ["one", "two:1"]
    assert request.parameters == {"a": "1"}


async def test_a_refusal_is_final_and_keeps_its_message() -> None:
    async def refuse(claim: Any, sc: Any, request: csi.CreateVolumeRequest) -> None:
        raise Refused("not today")

    with pytest.raises(Refused) as info:
        await run_hooks([refuse], {}, {}, csi.CreateVolumeRequest(name="pvc-1"))
    assert info.value.message == "not today"
    assert info.value.state is ProvisioningState.FINISHED


async def test_a_broken_hook_fails_the_attempt_naming_the_hook() -> None:
    async def broken(claim: Any, sc: Any, request: csi.CreateVolumeRequest) -> None:
        raise KeyError("oops")

    with structlog.testing.capture_logs() as logs, pytest.raises(ProvisioningError) as info:
        await run_hooks([broken], {}, {}, csi.CreateVolumeRequest(name="pvc-1"))
    assert "test_a_broken_hook_fails_the_attempt_naming_the_hook.<locals>.broken" in str(info.value)
    assert "KeyError" in str(info.value)
    assert info.value.state is ProvisioningState.FINISHED
    # The event has one line; the log has the traceback, where the hook's author needs it.
    (failed,) = [entry for entry in logs if entry["event"] == "create_volume_hook_failed"]
    assert failed["hook"].endswith("<locals>.broken")
    assert failed["log_level"] == "error"
    assert failed["exc_info"] is True


async def test_a_plain_function_is_a_hook_too_run_in_a_thread() -> None:
    """`def` instead of `async def`, as kopf and `kopf_csi.on` take either: it runs, in a thread
    (not the operator's loop), and its change is sent; a refusal from it is a refusal."""
    loop_thread = threading.get_ident()
    ran_in: list[int] = []

    def tag(claim: Any, sc: Any, request: csi.CreateVolumeRequest) -> None:
        ran_in.append(threading.get_ident())
        request.parameters["tagged"] = "yes"

    def refuse(claim: Any, sc: Any, request: csi.CreateVolumeRequest) -> None:
        raise Refused("not from a thread either")

    request = csi.CreateVolumeRequest(name="pvc-1", parameters={})
    await run_hooks([tag], {}, {}, request)
    assert request.parameters == {"tagged": "yes"}
    (thread,) = ran_in
    assert thread != loop_thread
    with pytest.raises(Refused) as info:
        await run_hooks([refuse], {}, {}, request)
    assert info.value.message == "not from a thread either"


async def test_a_hook_that_hangs_fails_the_attempt_after_the_timeout() -> None:
    """A hook that never returns would hold its claim for ever: it gets the CSI call's
    timeout, then the attempt fails naming it (and is retried as any failure); a hook's own
    TimeoutError is its bug, not our deadline."""

    async def hangs(claim: Any, sc: Any, request: csi.CreateVolumeRequest) -> None:
        await asyncio.Event().wait()

    async def times_out(claim: Any, sc: Any, request: csi.CreateVolumeRequest) -> None:
        raise TimeoutError("its own")

    with structlog.testing.capture_logs() as logs, pytest.raises(ProvisioningError) as info:
        await run_hooks([hangs], {}, {}, csi.CreateVolumeRequest(name="pvc-1"), timeout=0.05)
    assert str(info.value).endswith("<locals>.hangs did not return within 0.05s")
    assert info.value.state is ProvisioningState.FINISHED
    assert [entry["event"] for entry in logs] == ["create_volume_hook_timed_out"]

    with pytest.raises(ProvisioningError) as info:
        await run_hooks([times_out], {}, {}, csi.CreateVolumeRequest(name="pvc-1"), timeout=10)
    assert str(info.value).endswith("<locals>.times_out failed: TimeoutError: its own")


async def test_a_plain_function_runs_to_its_end_whatever_the_timeout() -> None:
    """A thread cannot be stopped: a plain `def` past the timeout is waited for, not left
    running in the executor's threads while the claim is retried."""

    def slow(claim: Any, sc: Any, request: csi.CreateVolumeRequest) -> None:
        time.sleep(0.2)
        request.parameters["slow"] = "done"

    request = csi.CreateVolumeRequest(name="pvc-1", parameters={})
    await run_hooks([slow], {}, {}, request, timeout=0.01)
    assert request.parameters == {"slow": "done"}
