"""`kopf run` with our modules logs as kopf does: one format, one level setting (kopf's).

kopf's command line configures stdlib logging before it loads the modules; our structlog
records then go through kopf's handler (`logs.follow_kopf`): every line in kopf's format, and
our debug lines (`csi_request`, per CSI call) only with `--verbose`. A bad `KOPF_CSI_` value
stops it, as a bad flag stops `kopf-csi run`.
"""

from __future__ import annotations

import asyncio
import pathlib
import re
import signal
import sys

import pytest

from kopf_csi.driver import Driver
from kopf_csi.testing.emulator import EmulatedCluster

from ..conftest import kopf_run_environment
from .processes import finished

ROOT = pathlib.Path(__file__).resolve().parents[2]
KOPF_LINE = re.compile(
    r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}\] \S+ +\[(DEBUG|INFO|WARNING|ERROR) *\] "
)


async def start_kopf_run(env: dict[str, str], *options: str) -> asyncio.subprocess.Process:
    """`kopf run` with the lifecycle module; stdout and stderr in one pipe."""
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "kopf", "run", *options, "--standalone", "--all-namespaces",
        "-m", "kopf_csi_handlers.lifecycle", env=env, cwd=ROOT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip


async def kopf_run(kubeconfig: pathlib.Path, socket_path: pathlib.Path, *options: str) -> list[str]:
    """`kopf run` with the lifecycle module until the driver is connected; its output lines."""
    process = await start_kopf_run(kopf_run_environment(kubeconfig, socket_path), *options)
    assert process.stdout is not None
    lines: list[str] = []
    try:
        while not any("driver_connected" in line for line in lines):
            line = await asyncio.wait_for(process.stdout.readline(), 30)
            assert line, "".join(lines)[-3000:]
            lines.append(line.decode())
    finally:
        process.send_signal(signal.SIGTERM)
        rest, _ = await finished(process, 30)
    lines += rest.decode().splitlines(keepends=True)
    assert process.returncode == 0, "".join(lines)[-3000:]
    return [line.rstrip("\n") for line in lines if line.strip()]


@pytest.mark.parametrize("verbose", [False, True], ids=["default", "verbose"])
async def test_one_format_and_kopfs_level(
    cluster: EmulatedCluster, driver: Driver, kubeconfig: pathlib.Path,
    socket_path: pathlib.Path, verbose: bool,
) -> None:  # fmt: skip
    lines = await kopf_run(kubeconfig, socket_path, *(["--verbose"] if verbose else []))
    # Every line in kopf's format, ours among them (structlog's own would start with a date).
    odd = [line for line in lines if not KOPF_LINE.match(line) and not line.startswith(" ")]
    assert not odd, "\n".join(lines)[-3000:]
    ours = [line for line in lines if "] kopf_csi." in line]
    assert any(re.search(r"\[INFO *\] driver_connected driver=", line) for line in ours), ours
    csi_requests = [line for line in ours if "csi_request" in line]
    if verbose:
        assert csi_requests, ours
        assert all("[DEBUG" in line for line in csi_requests), ours
    else:
        assert not [line for line in lines if "[DEBUG" in line], lines
        assert not csi_requests, ours


async def test_a_bad_variable_stops_kopf_run(tmp_path: pathlib.Path) -> None:
    """A bad `KOPF_CSI_` value under `kopf run` is final (said, then the process exits), as a
    bad flag is for `kopf-csi run`: kopf would retry the start-up handler every minute."""
    env = kopf_run_environment(tmp_path / "kubeconfig", tmp_path / "csi.sock")
    env["KOPF_CSI_TIMEOUT"] = "soon"
    process = await start_kopf_run(env)
    output, _ = await finished(process, 50)
    text = output.decode()
    assert process.returncode not in (0, None), text[-3000:]
    assert "failed permanently: KOPF_CSI_TIMEOUT='soon' is not a duration" in text, text[-3000:]
    assert "will try again" not in text, text[-3000:]
