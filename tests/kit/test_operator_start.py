"""The kit's operator fails its start, saying why, when kopf ends during it: a test then fails
at its `operator` fixture with the cause, not later in a wait for something that never comes."""

from __future__ import annotations

import pytest

from kopf_csi.driver import Driver
from kopf_csi.settings import Settings
from kopf_csi.testing.operator import running_operator


async def test_modules_without_the_login_fail_the_start_and_say_what_to_add(
    settings: Settings, driver: Driver
) -> None:
    """The README's mistake to make: `handler_modules` with the user's module only."""
    with pytest.raises(RuntimeError) as info:
        async with running_operator(settings=settings, modules=("tests.kit.own_resource",)):
            pass
    message = str(info.value)
    assert "LoginError" in message
    assert "kopf_csi_handlers.lifecycle (kopf's login) is not loaded" in message
    assert "DEFAULT_MODULES" in message
