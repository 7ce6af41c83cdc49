"""The client side's CPU per CSI call, and per message (de)serialised: `python -m devtools.csicost`.

Issue 34 found the CSI path (`CSIClient._call` → the generated stub → grpclib → h2 → betterproto2)
a fifth of the operator's CPU under churn. This measures that path alone, in seconds of this
process's CPU (`time.process_time`) per call:

- the reference driver (`python -m kopf_csi.driver`) runs in a subprocess on a unix socket in a
  temporary directory, so its CPU is not counted: only the client's (`CSIClient`, on the
  operator's event loop, `kopf_csi.loops`) is;
- each cycle is what one churned volume costs: CreateVolume (parameters, a mount capability,
  topology requirements, secrets), ControllerPublishVolume, ControllerUnpublishVolume and
  DeleteVolume, one call at a time; the CPU of each call is summed per RPC;
- then the pure serialisation (`bytes(message)`) and parsing (`Type.parse`) of the same
  requests and of the driver's answers, per message, in a loop.

Runs take a few seconds (`--cycles`, `--repeat`). To compare two trees, run this module with
`PYTHONPATH=<other tree>/src` (the `kopf_csi` it measures is printed first) and interleave the
runs: the machine is shared and noisy. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

import kopf_csi
from kopf_csi import logs, loops
from kopf_csi.csi import CSIClient
from kopf_csi.csi import messages as csi

NODE = "node-1"
TOPOLOGY_KEY = "topology.hostpath.csi.kopf.dev/node"
RPCS = ("CreateVolume", "ControllerPublishVolume", "ControllerUnpublishVolume", "DeleteVolume")


def create_request(index: int) -> csi.CreateVolumeRequest:
    """What the provisioner sends for a claim of a StorageClass with parameters and secrets."""
    segment = csi.Topology(segments={TOPOLOGY_KEY: NODE})
    capability = csi.VolumeCapability(
        mount=csi.VolumeCapabilityMountVolume(fs_type="ext4", mount_flags=["noatime"]),
        access_mode=csi.VolumeCapabilityAccessMode(
            mode=csi.VolumeCapabilityAccessModeMode.SINGLE_NODE_WRITER
        ),
    )
    return csi.CreateVolumeRequest(
        name=f"pvc-7c2f3a8e-4b1d-4f6a-9e0c-{index:012d}",
        capacity_range=csi.CapacityRange(required_bytes=1024**2),
        volume_capabilities=[capability],
        parameters={"type": "ssd", "replicas": "1", "encrypted": ""},
        secrets={"username": "admin", "password": "hunter2-very-secret"},
        accessibility_requirements=csi.TopologyRequirement(
            requisite=[segment], preferred=[segment]
        ),
    )


def publish_request(volume_id: str) -> csi.ControllerPublishVolumeRequest:
    capability = create_request(0).volume_capabilities[0]
    return csi.ControllerPublishVolumeRequest(
        volume_id=volume_id,
        node_id=NODE,
        volume_capability=capability,
        secrets={"username": "admin", "password": "hunter2-very-secret"},
        volume_context={"storage.kubernetes.io/csiProvisionerIdentity": "1700000000000-1-x"},
    )


def unpublish_request(volume_id: str) -> csi.ControllerUnpublishVolumeRequest:
    return csi.ControllerUnpublishVolumeRequest(
        volume_id=volume_id, node_id=NODE, secrets={"username": "admin"}
    )


def delete_request(volume_id: str) -> csi.DeleteVolumeRequest:
    return csi.DeleteVolumeRequest(volume_id=volume_id, secrets={"username": "admin"})


@contextlib.contextmanager
def driver(workdir: pathlib.Path) -> Iterator[str]:
    """The reference driver in a subprocess; yields its address."""
    socket_path = workdir / "csi.sock"
    command = [
        sys.executable, "-m", "kopf_csi.driver", "--endpoint", f"unix://{socket_path}",
        "--node-id", NODE, "--data-dir", str(workdir / "data"), "--known-nodes", "*", "--attach",
    ]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not socket_path.exists():
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the driver did not start (exit code {process.poll()})")
            time.sleep(0.05)
        yield f"unix://{socket_path}"
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


async def calls(address: str, cycles: int, offset: int) -> dict[str, float]:
    """CPU seconds per call of each RPC over `cycles` volume cycles (after a warm-up)."""
    spent = dict.fromkeys(RPCS, 0.0)
    async with CSIClient(address, timeout=10.0) as client:
        await client.wait_ready()

        async def cycle(index: int, account: bool) -> None:
            clock = time.process_time
            started = clock()
            created = await client.create_volume(create_request(index))
            volume_id = created.volume.volume_id if created.volume else ""
            published = clock()
            await client.controller_publish_volume(publish_request(volume_id))
            unpublished = clock()
            await client.controller_unpublish_volume(unpublish_request(volume_id))
            deleted = clock()
            await client.delete_volume(delete_request(volume_id))
            ended = clock()
            if account:
                spent["CreateVolume"] += published - started
                spent["ControllerPublishVolume"] += unpublished - published
                spent["ControllerUnpublishVolume"] += deleted - unpublished
                spent["DeleteVolume"] += ended - deleted

        for index in range(20):
            await cycle(offset + index, account=False)
        for index in range(cycles):
            await cycle(offset + 100 + index, account=True)
    return {rpc: seconds / cycles for rpc, seconds in spent.items()}


def per_op(function: Callable[[], Any], seconds: float = 0.15) -> float:
    """CPU seconds per call of `function`, over about `seconds` of CPU."""
    count = 0
    started = time.process_time()
    while True:
        for _ in range(50):
            function()
        count += 50
        elapsed = time.process_time() - started
        if elapsed >= seconds:
            return elapsed / count


def codec() -> dict[str, float]:
    """CPU seconds per serialisation and per parse, for each request and the driver's answers."""
    volume = csi.Volume(
        volume_id="7c2f3a8e-4b1d-4f6a-9e0c-000000000001",
        capacity_bytes=1024**2,
        volume_context={"node": NODE},
        accessible_topology=[csi.Topology(segments={TOPOLOGY_KEY: NODE})],
    )
    messages: dict[str, Any] = {
        "CreateVolumeRequest": create_request(1),
        "CreateVolumeResponse": csi.CreateVolumeResponse(volume=volume),
        "ControllerPublishVolumeRequest": publish_request(volume.volume_id),
        "ControllerPublishVolumeResponse": csi.ControllerPublishVolumeResponse(
            publish_context={"devicePath": "/dev/x"}
        ),
        "ControllerUnpublishVolumeRequest": unpublish_request(volume.volume_id),
        "DeleteVolumeRequest": delete_request(volume.volume_id),
    }
    result: dict[str, float] = {}
    for name, message in messages.items():
        data = bytes(message)
        result[f"bytes({name})"] = per_op(functools.partial(bytes, message))
        result[f"parse({name})"] = per_op(functools.partial(type(message).parse, data))
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m devtools.csicost", description=__doc__)
    parser.add_argument("--cycles", type=int, default=300, help="volume cycles per repeat")
    parser.add_argument("--repeat", type=int, default=3, help="runs of the cycles, each measured")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = parser.parse_args(argv)

    print(f"kopf_csi: {os.path.dirname(kopf_csi.__file__)}", file=sys.stderr)
    logs.configure(level="INFO")  # as the operator runs: no debug lines, no request dumps
    runs: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="csicost-") as tmp, driver(pathlib.Path(tmp)) as addr:
        for repeat in range(args.repeat):
            loop = loops.new_event_loop()
            try:
                runs.append(loop.run_until_complete(calls(addr, args.cycles, repeat * 100_000)))
            finally:
                loop.close()
    per_call = {rpc: statistics.mean(run[rpc] for run in runs) for rpc in RPCS}
    # A volume under churn: CreateVolume, DeleteVolume, and a quarter each of the attach calls.
    weights = {"CreateVolume": 1.0, "DeleteVolume": 1.0}
    weights |= {"ControllerPublishVolume": 0.25, "ControllerUnpublishVolume": 0.25}
    per_volume = sum(per_call[rpc] * weight for rpc, weight in weights.items())
    messages = codec()
    if args.json:
        print(json.dumps({"per_call": per_call, "per_volume": per_volume, "codec": messages}))
        return
    print(f"client CPU per call (us; mean of {args.repeat} x {args.cycles} cycles):")
    for rpc in RPCS:
        spread = ", ".join(f"{run[rpc] * 1e6:.0f}" for run in runs)
        print(f"  {rpc:<28} {per_call[rpc] * 1e6:7.1f}   ({spread})")
    print(f"  {'per volume (2.5 calls)':<28} {per_volume * 1e6:7.1f}")
    print("serialisation and parsing (us per message):")
    for name, seconds in messages.items():
        print(f"  {name:<45} {seconds * 1e6:7.1f}")


if __name__ == "__main__":
    main()
