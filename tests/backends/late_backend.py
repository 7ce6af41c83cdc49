"""A handler module that registers the memory back end after start-up, once told to
(`REGISTER`), as a module would after an asynchronous set-up of its own."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import kopf

from kopf_csi.provisioning.backends import register_provisioner
from tests.backends.memory_backend import NAME, MemoryBackend

REGISTER = threading.Event()
"""Set by the test (another thread): register the back end now."""


@kopf.on.startup(id="tests.late_backend")
async def register_later(memo: kopf.Memo, **_: Any) -> None:
    async def later() -> None:
        await asyncio.to_thread(REGISTER.wait)
        register_provisioner(memo, name=NAME, provisioner=MemoryBackend())

    memo.late_registration = asyncio.create_task(later())
