"""`python -m devtools.monitoring [--check] [--runbooks URL]`: write (or check) the generated
rules and dashboard under manifests/monitoring/."""

from __future__ import annotations

import argparse
import sys

from devtools.monitoring import alerts, files


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m devtools.monitoring", description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if a file is out of date")
    parser.add_argument("--runbooks", default=alerts.RUNBOOKS, help="the runbooks' URL")
    args = parser.parse_args()
    if args.check:
        stale = files.stale(args.runbooks)
        for name in stale:
            print(f"out of date: manifests/monitoring/{name}", file=sys.stderr)
        sys.exit(1 if stale else 0)
    for path in files.write(args.runbooks):
        print(path.relative_to(files.ROOT))


if __name__ == "__main__":
    main()
