"""`devtools.httpcost`: the client's CPU per request through aiohttp, the operator's pool and
bare streams, against its own server process: every way gets every answer whole, and the
figures come out."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys

import pytest

from devtools import httpcost


def test_every_way_reads_every_answer_and_reports_its_cost() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "devtools.httpcost", "--requests", "30"],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    figures = dict(re.findall(r"^(aiohttp|pool|streams): (\d+, \d+) µs", done.stdout, re.MULTILINE))
    assert set(figures) == {"aiohttp", "pool", "streams"}, done.stdout + done.stderr
    assert all(int(value) > 0 for pair in figures.values() for value in pair.split(", "))


async def test_an_answer_cut_short_is_an_error_not_a_figure() -> None:
    """The bare way reads each answer by its length: a server that sends less fails it."""

    async def short(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{}")
        writer.close()

    server = await asyncio.start_server(short, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        with pytest.raises(asyncio.IncompleteReadError):
            await httpcost._with_streams(port, 1)
