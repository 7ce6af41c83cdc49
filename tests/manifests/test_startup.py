"""`kopf-csi run` with the Deployment's args, as the manifests' ServiceAccount: a quiet start.

On a real API server the operator started under the shipped RBAC with kopf retrying a refused
CRD listing, logging an error per attempt. Here the emulator authorizes with the rendered RBAC
(`rendering.rbac()`), the operator runs as its own process with the ServiceAccount's token and
the Deployment's operator args (socket and endpoint made local), and:

- it gets ready (`/readyz` 200) and takes its Leases;
- the API refused none of its requests;
- its log from start to SIGTERM holds no warning, no error and no traceback.
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import socket
import sys

import aiohttp

from kopf_csi.driver import Driver
from kopf_csi.testing.authorization import Authorizer, service_account
from kopf_csi.testing.emulator import EmulatedCluster

from ..conftest import stopped_cleanly
from .rendering import MANIFESTS, ROOT, find, rbac, render
from .scenarios import ACCOUNT, OPERATOR_NAMESPACE, until

QUIET_LEVELS = {"debug", "info"}


def _operator_args(socket_path: pathlib.Path, port: int) -> list[str]:
    deployment = find(render(MANIFESTS), "Deployment", "kopf-csi")[0]
    container = next(
        c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "kopf-csi"
    )
    local = {"--csi-address": f"unix://{socket_path}", "--http-endpoint": f"127.0.0.1:{port}"}
    args = []
    for arg in container["args"]:
        flag = arg.split("=", 1)[0]
        args.append(f"{flag}={local[flag]}" if flag in local else arg)
    return args


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def _ready(url: str) -> bool:
    try:
        async with aiohttp.ClientSession() as session, session.get(url) as response:
            return response.status == 200
    except aiohttp.ClientError:
        return False


async def test_the_start_is_quiet_under_the_shipped_rbac(
    driver: Driver, socket_path: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    authorizer = Authorizer(rbac())
    namespaces = ("default", "kube-system", OPERATOR_NAMESPACE)
    async with EmulatedCluster(namespaces=namespaces, authorizer=authorizer) as cluster:
        token = authorizer.login(service_account(OPERATOR_NAMESPACE, ACCOUNT))
        kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig", token=token)
        port = _free_port()
        env = {name: value for name, value in os.environ.items() if not name.startswith("KOPF_")}
        env.update(KUBECONFIG=str(kubeconfig), POD_NAMESPACE=OPERATOR_NAMESPACE)
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "kopf_csi", "run", *_operator_args(socket_path, port),
            "--log-format=json", env=env, cwd=ROOT,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        try:
            ready = f"http://127.0.0.1:{port}/readyz"

            async def started() -> bool:
                assert process.returncode is None, "kopf-csi run exited early"
                return await _ready(ready)

            while not await started():  # noqa: ASYNC110 (an HTTP probe, not a flag)
                await asyncio.sleep(0.1)
            await until(
                "the Leases taken",
                lambda: len(cluster.objects("leases", namespace=OPERATOR_NAMESPACE)) >= 4,
                timeout=30,
            )
            await asyncio.sleep(1.0)  # the watches run for a while
        finally:
            log = await stopped_cleanly(process)
    assert not authorizer.denials, authorizer.denials
    records = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    assert any(record["event"] == "operator_stopped" for record in records)
    loud = [record for record in records if record.get("level") not in QUIET_LEVELS]
    assert not loud, "warnings or errors at start-up:\n" + "\n".join(map(str, loud))
