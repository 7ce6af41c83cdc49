"""Waiting for the operator's process in the command-line tests."""

from __future__ import annotations

import asyncio


async def finished(process: asyncio.subprocess.Process, timeout: float) -> tuple[bytes, bytes]:
    """The process's output (stdout, stderr) once it has exited. One still running after
    `timeout` seconds fails the test (TimeoutError) and is killed, not left running on CI."""
    try:
        async with asyncio.timeout(timeout):
            return await process.communicate()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
