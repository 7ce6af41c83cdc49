"""The command line: `python -m kopf_csi.driver --endpoint ... --node-id ... --data-dir ...`.

Parses flags into a `DriverConfig`, configures logging (JSON lines on stderr, or console lines
on a terminal), runs the driver until SIGTERM or SIGINT, then stops it gracefully: running calls
finish, the socket file is removed. Every `Features` field is a `--flag/--no-flag` pair.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import pathlib
import signal
import sys
from collections.abc import Sequence
from typing import Any

from kopf_csi import logs
from kopf_csi.driver import secrets
from kopf_csi.driver.calllog import CallLog
from kopf_csi.driver.config import (
    DEFAULT_NAME,
    DEFAULT_TOPOLOGY_KEY,
    VERSION,
    DriverConfig,
    Features,
    Limits,
    SecretsPolicy,
)
from kopf_csi.driver.running import Driver

__all__ = ["main", "parse_args", "parse_size"]

UNITS = {"": 1, "k": 1000, "m": 1000**2, "g": 1000**3, "t": 1000**4}
UNITS |= {"ki": 1024, "mi": 1024**2, "gi": 1024**3, "ti": 1024**4}


def parse_size(text: str) -> int:
    """`10Gi`, `500M`, `1048576` → bytes (Kubernetes quantity suffixes)."""
    number = text.rstrip("KkMmGgTtIi")
    unit = text[len(number) :].lower()
    if unit not in UNITS or not number.isdigit():
        raise argparse.ArgumentTypeError(f"invalid size {text!r}; use e.g. 1048576, 500M, 10Gi")
    return int(number) * UNITS[unit]


def _words(text: str) -> frozenset[str]:
    return frozenset(filter(None, (w.strip() for w in text.split(","))))


def _operations(text: str) -> frozenset[str]:
    try:
        return secrets.parse_operations(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m kopf_csi.driver",
        description="kopf-csi's reference hostpath-style CSI driver (Identity, Controller, Node).",
    )
    parser.add_argument("--endpoint", required=True, help="unix:///path/csi.sock or a path")
    parser.add_argument("--node-id", required=True, help="this node's id (NodeGetInfo)")
    parser.add_argument("--data-dir", required=True, type=pathlib.Path, help="state and volumes")
    parser.add_argument("--name", default=DEFAULT_NAME, help="driver name (GetPluginInfo)")
    parser.add_argument(
        "--known-nodes",
        default="",
        help="comma-separated other node ids to accept for ControllerPublish; '*' for any",
    )
    parser.add_argument("--topology-key", default=DEFAULT_TOPOLOGY_KEY)
    parser.add_argument(
        "--mutable-parameters",
        type=_words,
        default=DriverConfig.__dataclass_fields__["mutable_parameters"].default,
        help="comma-separated keys ControllerModifyVolume accepts (default: iops,throughput)",
    )

    features = parser.add_argument_group("features (advertised and served only when on)")
    for field in dataclasses.fields(Features):
        flag = "--" + field.name.replace("_", "-")
        features.add_argument(
            flag,
            action=argparse.BooleanOptionalAction,
            default=field.default,
            dest=field.name,
            help=f"default: {'on' if field.default else 'off'}",
        )

    limits = parser.add_argument_group("limits")
    limits.add_argument("--total-capacity", type=parse_size, help="bytes per pool (per node)")
    limits.add_argument("--max-volume-size", type=parse_size)
    limits.add_argument(
        "--default-volume-size", type=parse_size, default=Limits().default_volume_size
    )
    limits.add_argument("--max-volumes-per-node", type=int, default=0, help="0: unlimited")

    secured = parser.add_argument_group("secrets")
    secured.add_argument(
        "--require-secrets",
        type=_operations,
        default=frozenset(),
        help="RPCs that need secrets: create, delete, provisioner, controller-publish, "
        "node-stage, node-publish, controller-expand, node-expand, snapshotter, "
        "group-snapshotter, modify, validate, all, or RPC names",
    )
    secured.add_argument(
        "--secrets-file",
        type=pathlib.Path,
        help="a JSON object of the exact secrets required (default: any non-empty secrets)",
    )

    faults = parser.add_argument_group("fault injection")
    faults.add_argument("--faults-file", type=pathlib.Path, help="JSON rules, re-read on change")
    faults.add_argument("--faults-seed", type=int, help="seed for fractional faults")
    faults.add_argument(
        "--call-log", type=pathlib.Path, help="append what each volume call did (JSON lines)"
    )

    other = parser.add_argument_group("process")
    other.add_argument(
        "--durable",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="fsync every state record (default: on)",
    )
    other.add_argument("--grace", type=float, default=5.0, help="seconds to finish calls on stop")
    other.add_argument("--log-level", default="INFO")
    other.add_argument(
        "--log-format", choices=["json", "console"], help="default: json unless a tty"
    )
    other.add_argument("--version", action="version", version=f"%(prog)s {VERSION}")
    return parser


def parse_args(argv: Sequence[str]) -> tuple[DriverConfig, pathlib.Path, argparse.Namespace]:
    """argv → (the config, the socket path, the remaining process options)."""
    parser = _build_parser()
    args = parser.parse_args(argv)
    endpoint: str = args.endpoint
    socket_path = pathlib.Path(endpoint.removeprefix("unix://").removeprefix("unix:"))
    expected: dict[str, str] | None = None
    if args.secrets_file is not None:
        raw: Any = json.loads(args.secrets_file.read_text(encoding="utf-8"))
        if not isinstance(raw, dict):
            parser.error("--secrets-file must hold a JSON object")
        expected = {str(k): str(v) for k, v in raw.items()}
    known = _words(args.known_nodes)
    config = DriverConfig(
        node_id=args.node_id,
        data_dir=args.data_dir,
        name=args.name,
        known_nodes=None if "*" in known else known,
        topology_key=args.topology_key,
        mutable_parameters=args.mutable_parameters,
        features=Features(**{f.name: getattr(args, f.name) for f in dataclasses.fields(Features)}),
        limits=Limits(
            total_capacity=args.total_capacity,
            max_volume_size=args.max_volume_size,
            default_volume_size=args.default_volume_size,
            max_volumes_per_node=args.max_volumes_per_node,
        ),
        secrets=SecretsPolicy(required_for=args.require_secrets, expected=expected),
        faults_file=args.faults_file,
        faults_seed=args.faults_seed,
        durable=args.durable,
    )
    return config, socket_path, args


async def run(
    config: DriverConfig,
    *,
    socket_path: pathlib.Path,
    grace: float,
    call_log: pathlib.Path | None = None,
) -> None:
    """Serve until SIGTERM or SIGINT, then stop gracefully."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    calls = None if call_log is None else CallLog(path=call_log)
    driver = Driver(config, socket_path=socket_path, calls=calls)
    await driver.start()
    try:
        await stop.wait()
    finally:
        await driver.stop(grace=grace)


def main(argv: Sequence[str] | None = None) -> None:
    config, socket_path, args = parse_args(sys.argv[1:] if argv is None else argv)
    json_lines = args.log_format == "json" or (args.log_format is None and not sys.stderr.isatty())
    logs.configure(level=args.log_level, json=json_lines)
    asyncio.run(run(config, socket_path=socket_path, grace=args.grace, call_log=args.call_log))


if __name__ == "__main__":
    main()
