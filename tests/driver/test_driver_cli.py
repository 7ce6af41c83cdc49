"""The command line: flags into a config, and the driver as its own process.

We test these aspects:
- flags map to the config: features on/off, sizes with suffixes, known nodes, secrets, faults;
- bad flags are refused with a usage error;
- `python -m kopf_csi.driver` serves Probe on its socket, logs JSON lines, exits cleanly on
  SIGTERM and removes its socket; started again on the same data dir, it still has the volume.
"""

from __future__ import annotations

import asyncio
import json
import pathlib
import signal
import sys

import pytest
from driver_helpers import create
from grpclib.client import Channel

from kopf_csi.csi._generated.csi import v1 as csi
from kopf_csi.driver import __main__ as cli

GiB = 1024**3


def test_minimal_flags(tmp_path: pathlib.Path) -> None:
    config, socket_path, args = cli.parse_args(
        ["--endpoint", "unix:///run/csi/csi.sock", "--node-id", "n1", "--data-dir", str(tmp_path)]
    )
    assert socket_path == pathlib.Path("/run/csi/csi.sock")
    assert (config.node_id, config.data_dir, config.name) == (
        "n1",
        tmp_path,
        "hostpath.csi.kopf.dev",
    )
    assert config.features.topology
    assert not config.features.attach
    assert config.known_nodes == frozenset()
    assert args.grace == 5.0


def test_all_flags(tmp_path: pathlib.Path) -> None:
    secrets_file = tmp_path / "secrets.json"
    secrets_file.write_text(json.dumps({"password": "p"}))
    config, socket_path, _ = cli.parse_args(
        [
            "--endpoint", str(tmp_path / "csi.sock"),
            "--node-id", "n1",
            "--data-dir", str(tmp_path),
            "--name", "x.csi.example.com",
            "--known-nodes", "*",
            "--attach", "--no-topology", "--no-snapshots",
            "--total-capacity", "10Gi",
            "--max-volume-size", "500M",
            "--max-volumes-per-node", "3",
            "--mutable-parameters", "iops,tier",
            "--require-secrets", "create,node-stage",
            "--secrets-file", str(secrets_file),
            "--faults-file", str(tmp_path / "faults.json"),
            "--faults-seed", "7",
            "--no-durable",
        ]
    )  # fmt: skip
    assert socket_path == tmp_path / "csi.sock"
    assert config.name == "x.csi.example.com"
    assert config.known_nodes is None
    assert config.features.attach
    assert not config.features.topology
    assert not config.features.snapshots
    assert config.limits.total_capacity == 10 * GiB
    assert config.limits.max_volume_size == 500 * 1000**2
    assert config.limits.max_volumes_per_node == 3
    assert config.mutable_parameters == {"iops", "tier"}
    assert config.secrets.required_for == {"CreateVolume", "NodeStageVolume"}
    assert config.secrets.expected == {"password": "p"}
    assert config.faults_file == tmp_path / "faults.json"
    assert config.faults_seed == 7
    assert not config.durable


@pytest.mark.parametrize(
    "extra",
    [
        pytest.param(["--total-capacity", "ten"], id="bad-size"),
        pytest.param(["--require-secrets", "everything"], id="bad-secrets-operation"),
        pytest.param(["--attach=yes"], id="bad-boolean"),
    ],
)
def test_bad_flags(tmp_path: pathlib.Path, extra: list[str]) -> None:
    base = ["--endpoint", "x.sock", "--node-id", "n1", "--data-dir", str(tmp_path)]
    with pytest.raises(SystemExit) as err:
        cli.parse_args([*base, *extra])
    assert err.value.code == 2


async def run_driver(
    socket_path: pathlib.Path, data_dir: pathlib.Path
) -> asyncio.subprocess.Process:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "kopf_csi.driver",
        "--endpoint", f"unix://{socket_path}",
        "--node-id", "n1",
        "--data-dir", str(data_dir),
        "--no-durable",
        "--log-format", "json",
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    channel = Channel(path=str(socket_path))
    try:
        for _ in range(200):  # until it answers: the socket appears once it serves
            assert process.returncode is None, "the driver exited at start"
            try:
                await csi.IdentityStub(channel).probe(csi.ProbeRequest(), timeout=1)
            except (ConnectionError, FileNotFoundError):
                await asyncio.sleep(0.05)
            else:
                return process
    finally:
        channel.close()
    process.kill()
    raise AssertionError("the driver never answered Probe")


async def stop_driver(process: asyncio.subprocess.Process) -> list[dict[str, object]]:
    process.send_signal(signal.SIGTERM)
    _, stderr = await asyncio.wait_for(process.communicate(), timeout=10)
    assert process.returncode == 0, stderr.decode()
    return [json.loads(line) for line in stderr.decode().splitlines() if line.startswith("{")]


async def test_runs_as_a_process(tmp_path: pathlib.Path) -> None:
    socket_path, data_dir = tmp_path / "csi.sock", tmp_path / "data"
    process = await run_driver(socket_path, data_dir)
    channel = Channel(path=str(socket_path))
    try:
        probe = await csi.IdentityStub(channel).probe(csi.ProbeRequest(), timeout=5)
        assert probe.ready is True
        volume = await create(csi.ControllerStub(channel))
    finally:
        channel.close()
    logs = await stop_driver(process)
    assert not socket_path.exists()
    events = [e["event"] for e in logs]
    assert events[0] == "driver_started"
    assert events[-1] == "driver_stopped"
    assert {"method": "Probe", "code": "OK"}.items() <= next(
        e for e in logs if e["event"] == "rpc_handled"
    ).items()

    process = await run_driver(socket_path, data_dir)  # the same data dir: the volume is there
    channel = Channel(path=str(socket_path))
    try:
        listed = await csi.ControllerStub(channel).list_volumes(csi.ListVolumesRequest(), timeout=5)
        assert [e.volume.volume_id for e in listed.entries if e.volume] == [volume.volume_id]
    finally:
        channel.close()
    await stop_driver(process)


def test_help_lists_the_flags(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as err:
        cli.parse_args(["--help"])
    assert err.value.code == 0
    text = capsys.readouterr().out
    for flag in (
        "--endpoint",
        "--node-id",
        "--data-dir",
        "--faults-file",
        "--no-attach",
        "--require-secrets",
    ):
        assert flag in text
