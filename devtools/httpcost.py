"""What an API request costs the client in CPU: aiohttp's `ClientSession`, the operator's own
pool (`kopf_csi.httppool`) and bare streams.

    python -m devtools.httpcost --requests 5000

A local aiohttp server (another process, so that only the client's CPU is counted) answers
every request with a ConfigMap of about 1 KB. The client sends PATCHes with a new path each
(as the operator's writes have), one after another on one connection: through
`aiohttp.ClientSession.request` as `kopf_csi.kube` sent them until the eighth session (a built
URL, no timeout); through `kopf_csi.httppool.Pool`, as it sends them now; and as bare HTTP/1.1
over `asyncio.open_connection` (the request written in one piece, the answer read by its
Content-Length, no pool): the floor. It reports the client's CPU per request of each, twice.
Plain HTTP: TLS costs them all the same (docs/benchmarks.md, "Seventh session", "Eighth
session").
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time
import uuid

import aiohttp
import yarl
from aiohttp import web

from kopf_csi import httppool, loops

__all__ = ["measure", "serve"]

PATCH = b'{"data":{"b":"1"}}'
ANSWER = (
    b'{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"x","namespace":"default",'
    b'"resourceVersion":"123"},"data":{"a":"' + b"x" * 900 + b'"}}'
)


def serve() -> None:
    """The server: every request answered with `ANSWER`; its port is the first line it prints
    (then it runs until killed)."""

    async def answer(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=ANSWER, content_type="application/json")

    async def run() -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", answer)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        print(runner.addresses[0][1], flush=True)
        await asyncio.Event().wait()

    asyncio.run(run())


def _path() -> str:
    return f"/api/v1/namespaces/default/configmaps/cm-{uuid.uuid4()}"


async def _with_aiohttp(port: int, requests: int) -> float:
    async with aiohttp.ClientSession() as session:
        started = time.process_time()
        for _ in range(requests):
            url = yarl.URL.build(
                scheme="http", authority=f"127.0.0.1:{port}", path=_path(),
                query_string="fieldManager=csi-provisioner", encoded=True,
            )  # fmt: skip
            headers = {"Content-Type": "application/merge-patch+json", "Accept": "application/json"}
            async with session.request(
                "PATCH", url, data=PATCH, headers=headers, timeout=aiohttp.ClientTimeout()
            ) as response:
                await response.read()
        return (time.process_time() - started) / requests


async def _with_pool(port: int, requests: int) -> float:
    pool = httppool.Pool("127.0.0.1", port)
    try:
        started = time.process_time()
        for _ in range(requests):
            headers = {"Content-Type": "application/merge-patch+json", "Accept": "application/json"}
            await pool.request("PATCH", f"{_path()}?fieldManager=csi-provisioner", headers, PATCH)
        return (time.process_time() - started) / requests
    finally:
        await pool.close()


async def _with_streams(port: int, requests: int) -> float:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    started = time.process_time()
    for _ in range(requests):
        head = (
            f"PATCH {_path()}?fieldManager=csi-provisioner HTTP/1.1\r\n"
            f"Host: 127.0.0.1:{port}\r\nContent-Type: application/merge-patch+json\r\n"
            f"Accept: application/json\r\nContent-Length: {len(PATCH)}\r\n\r\n"
        )
        writer.write(head.encode() + PATCH)
        lines = (await reader.readuntil(b"\r\n\r\n")).split(b"\r\n")
        sized = [line for line in lines if line.lower().startswith(b"content-length:")]
        length = int(sized[0].split(b":", 1)[1])
        await reader.readexactly(length)
    writer.close()
    return (time.process_time() - started) / requests


async def measure(port: int, requests: int) -> dict[str, list[float]]:
    """The client's CPU seconds per request, each way twice (interleaved)."""
    found: dict[str, list[float]] = {"aiohttp": [], "pool": [], "streams": []}
    for _ in range(2):
        found["aiohttp"].append(await _with_aiohttp(port, requests))
        found["pool"].append(await _with_pool(port, requests))
        found["streams"].append(await _with_streams(port, requests))
    return found


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m devtools.httpcost", description=__doc__)
    parser.add_argument("--requests", type=int, default=5000, help="per way and round (5000)")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve()
        return
    command = [sys.executable, "-m", "devtools.httpcost", "--serve"]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    loop = loops.new_event_loop()  # the operator's loop (uvloop where installed)
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())  # listening once it says where
        found = loop.run_until_complete(measure(port, args.requests))
    finally:
        loop.close()
        server.kill()
        server.wait()
    for way, seconds in found.items():
        figures = ", ".join(f"{value * 1e6:.0f}" for value in seconds)
        print(f"{way}: {figures} µs of the client's CPU per request")


if __name__ == "__main__":
    main()
