"""`kopf_csi.loops`: the operator's event loop by name.

We test these aspects:
- `auto` and `uvloop` give uvloop's loop where it is installed, `asyncio` asyncio's own;
- `name` tells them apart (the start-up log line says it);
- an unknown name, or uvloop asked for where it is missing, is a clear error, not a fallback.
"""

from __future__ import annotations

import asyncio

import pytest

from kopf_csi import loops


@pytest.mark.parametrize(
    ("choice", "expected"),
    [("auto", "uvloop"), ("uvloop", "uvloop"), ("asyncio", "asyncio")],
)
def test_each_choice_gives_its_loop(choice: str, expected: str) -> None:
    assert loops.available()  # a dependency on Linux: the suite runs with it
    loop = loops.new_event_loop(choice)
    try:
        assert loops.name(loop) == expected
        assert loop.run_until_complete(asyncio.sleep(0, result="ran")) == "ran"
    finally:
        loop.close()


def test_auto_falls_back_to_asyncio_without_uvloop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loops, "available", lambda: False)
    loop = loops.new_event_loop("auto")
    try:
        assert loops.name(loop) == "asyncio"
    finally:
        loop.close()


def test_an_unknown_loop_is_refused_by_name() -> None:
    with pytest.raises(loops.EventLoopError, match="'libuv' is not one of auto, uvloop, asyncio"):
        loops.new_event_loop("libuv")
