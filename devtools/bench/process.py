"""The operator's process, seen from the benchmark: start, ask, sample, stop."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import sys
from typing import IO, Any

from devtools.bench import procfs

__all__ = ["OperatorProcess", "OperatorProcessError"]

# The repository's root: `devtools` is not installed, so the child finds it on PYTHONPATH
# whatever the working directory it is started from.
CHECKOUT = pathlib.Path(__file__).resolve().parents[2]


OPERATOR_PATH_ENV = "KOPF_CSI_BENCH_OPERATOR_PATH"
"""Directories put before the checkout on the operator's path only: another revision's `src`
and root (`git archive REV | tar -x -C DIR`, then `DIR/src:DIR`), so that its operator runs
under this benchmark, emulator and latency model (how the model was checked against the real
server's figures for f871e19, docs/benchmarks.md)."""


def child_environment(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for `python -m devtools.bench.operator`: the checkout first on its path
    (after `KOPF_CSI_BENCH_OPERATOR_PATH`, if set)."""
    env = dict(os.environ if environ is None else environ)
    first = [p for p in env.get(OPERATOR_PATH_ENV, "").split(os.pathsep) if p]
    path = [*first, str(CHECKOUT), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    env["PYTHONPATH"] = os.pathsep.join(path)
    return env


class OperatorProcessError(RuntimeError):
    """The operator process failed to start, answer or stop; the message has its log's tail."""


class OperatorProcess:
    """`python -m devtools.bench.operator` as a child process, its log in a file."""

    def __init__(
        self,
        *,
        kubeconfig: pathlib.Path,
        csi_address: str,
        workers: int,
        log_path: pathlib.Path,
        qps: float = 1000.0,
        burst: int = 2000,
        profile: pathlib.Path | None = None,
        tracemalloc: int = 0,
        log_level: str = "INFO",
        start_timeout: float = 60.0,
        trace_requests: int | None = None,
        python: str | None = None,
    ) -> None:
        self.argv = [
            python or sys.executable, "-m", "devtools.bench.operator",
            "--kubeconfig", str(kubeconfig), "--csi-address", csi_address,
            "--workers", str(workers), "--log-level", log_level,
            "--kube-api-qps", str(qps), "--kube-api-burst", str(burst),
        ]  # fmt: skip
        if profile is not None:
            self.argv += ["--profile", str(profile)]
        if tracemalloc:
            self.argv += ["--tracemalloc", str(tracemalloc)]
        if trace_requests is not None:  # else the operator's default (an older one: no flag)
            self.argv += ["--trace-requests", str(trace_requests)]
        self.log_path = log_path
        self.start_timeout = start_timeout
        self._process: asyncio.subprocess.Process | None = None
        self._log: IO[bytes] | None = None
        self.final: procfs.Sample | None = None

    @property
    def pid(self) -> int:
        if self._process is None:
            raise OperatorProcessError("the operator process is not running")
        return self._process.pid

    async def spawn(self) -> int:
        """Start the process (its pid is known from here on); then `wait_ready()`."""
        self._log = self.log_path.open("wb")
        self._process = await asyncio.create_subprocess_exec(
            *self.argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=self._log,
            env=child_environment(),
        )
        return self._process.pid

    async def wait_ready(self) -> dict[str, Any]:
        """Until kopf has started and scanned the API (the operator says so)."""
        try:
            answer = await asyncio.wait_for(self._read(), self.start_timeout)
        except TimeoutError:
            raise OperatorProcessError(
                f"the operator was not ready in {self.start_timeout:g}s\n{self.log_tail()}"
            ) from None
        if not answer.get("ready"):
            raise OperatorProcessError(f"the operator did not start: {answer}\n{self.log_tail()}")
        return answer

    async def stats(self) -> dict[str, Any]:
        """The operator's caches and queues (costs it a little CPU: not during a phase)."""
        await self._send("stats")
        return await asyncio.wait_for(self._read(), 10.0)

    async def collect(self) -> dict[str, Any]:
        """A full garbage collection in the operator."""
        await self._send("gc")
        return await asyncio.wait_for(self._read(), 60.0)

    async def memory(self) -> dict[str, Any]:
        """Top allocation sites (the operator must run with tracemalloc)."""
        await self._send("memory")
        return await asyncio.wait_for(self._read(), 120.0)

    async def growth(self, *, walk: bool = False) -> dict[str, Any]:
        """What grew in the operator since the previous call (`devtools.bench.growth`); with
        `walk`, the containers too."""
        await self._send("growth walk" if walk else "growth")
        return await asyncio.wait_for(self._read(), 120.0)

    async def waits(self, since: float, until: float) -> dict[str, Any]:
        """Where claims waited inside the operator since `since` (`devtools.bench.waits`)."""
        await self._send(f"waits {since} {until}")
        return await asyncio.wait_for(self._read(), 10.0)

    def sample(self) -> procfs.Sample:
        return procfs.sample(self.pid)

    async def stop(self, *, timeout: float = 30.0) -> int:
        """Stop it, keeping its last CPU and memory figures in `final`."""
        process = self._process
        if process is None:
            return 0
        if process.returncode is None:
            self.final = procfs.sample(process.pid)  # before it exits and /proc goes
            try:
                await self._send("stop")
                await asyncio.wait_for(process.wait(), timeout)
            except (TimeoutError, ConnectionError):
                process.kill()
                await process.wait()
        if self._log is not None:
            self._log.close()
        return process.returncode or 0

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    async def _send(self, command: str) -> None:
        if self._process is None or self._process.stdin is None:
            raise OperatorProcessError("the operator process is not running")
        self._process.stdin.write(command.encode() + b"\n")
        await self._process.stdin.drain()

    async def _read(self) -> dict[str, Any]:
        if self._process is None or self._process.stdout is None:
            raise OperatorProcessError("the operator process is not running")
        line = await self._process.stdout.readline()
        if not line:
            code = await self._process.wait()
            raise OperatorProcessError(f"the operator exited ({code})\n{self.log_tail()}")
        answer: dict[str, Any] = json.loads(line)
        return answer
