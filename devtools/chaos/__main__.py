"""`python -m devtools.chaos --claims 500 --attach 500 --seed N`, or `--soak 10000 --wave 500`.

Prints the summary table on stdout (progress on stderr); exits 1 when any count is not 0, a
secret value was found in the output, or (soak) the curve is not flat.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import pathlib
import sys
from collections.abc import Sequence

from devtools.bench.progress import Progress
from devtools.chaos.environment import ChaosError
from devtools.chaos.plot import soak_svg
from devtools.chaos.report import format_chaos, format_soak
from devtools.chaos.running import ChaosOptions, SoakOptions, run_chaos, run_soak
from kopf_csi import logs


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m devtools.chaos", description=__doc__)
    parser.add_argument("--claims", type=int, default=500, help="claims to provision")
    parser.add_argument("--attach", type=int, default=500, help="of which attached to nodes")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--kills", type=int, default=3, help="operator SIGKILLs per phase")
    parser.add_argument("--driver-restarts", type=int, default=1, help="per phase")
    parser.add_argument(
        "--apiserver-restarts", type=int, default=1, help="API server restarts per phase"
    )
    parser.add_argument("--etcd-stops", type=int, default=1, help="etcd stops per phase")
    parser.add_argument("--no-api-faults", action="store_true")
    parser.add_argument("--no-driver-faults", action="store_true")
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--log-level", default="INFO", help="the operator's log level")
    parser.add_argument("--timeout", type=float, default=None, help="seconds per phase")
    parser.add_argument("--soak", type=int, default=None, metavar="N", help="instead: soak run")
    parser.add_argument("--wave", type=int, default=500, help="soak: claims per wave")
    parser.add_argument("--svg", type=pathlib.Path, default=None, help="soak: plot the curve")
    parser.add_argument("--dir", type=pathlib.Path, default=None, help="working directory (kept)")
    parser.add_argument("--json", type=pathlib.Path, default=None, help="write the results here")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    logs.configure(level="WARNING", json=False)
    progress = Progress(enabled=not args.no_progress)
    try:
        if args.soak:
            options = SoakOptions(total=args.soak, wave=args.wave, workdir=args.dir)
            result = asyncio.run(run_soak(options, progress))
            text = format_soak(result)
            if args.svg:
                caption = f" ({result['config']['date']}, revision {result['config']['revision']})"
                args.svg.write_text(soak_svg(result["points"], caption=caption))
        else:
            chaos = ChaosOptions(
                claims=args.claims,
                attach=args.attach,
                seed=args.seed,
                kills=args.kills,
                driver_restarts=args.driver_restarts,
                apiserver_restarts=args.apiserver_restarts,
                etcd_stops=args.etcd_stops,
                api_faults=not args.no_api_faults,
                driver_faults=not args.no_driver_faults,
                nodes=args.nodes,
                log_level=args.log_level,
                timeout=args.timeout,
                workdir=args.dir,
            )
            result = asyncio.run(run_chaos(chaos, progress))
            text = format_chaos(result)
    except ChaosError as exc:
        print(f"the run failed: {exc}", file=sys.stderr)
        sys.exit(1)
    print(text)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    sys.exit(0 if result["ok"] else 1)


if __name__ == "__main__":
    main()
