"""`kopf-csi migrate [FILE ...]`, also `kubectl csi migrate`: a driver's controller from the Go
CSI sidecars to kopf-csi (`--back`: and back), as a manifest stream in, a manifest stream out.

Reads the files (or stdin, or `-`), writes the stream to stdout, and what it did, and why not,
to stderr. Exit codes: 0 migrated (or, with `--check`, would be; or nothing to do), 1 refused
(every refusal on stderr, naming its container and flag; nothing on stdout), 2 unusable input
or arguments (one line).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TextIO

from kopf_csi.migration import stream, transform

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "files", nargs="*", metavar="FILE",
        help="manifest streams to read, in order (stdin when none, or -): helm template,"
             " kustomize build, kubectl get -o yaml",
    )  # fmt: skip
    parser.add_argument(
        "--back", action="store_true",
        help="undo a migration: the migrated stream in, the original out (the added RBAC left"
             " out)",
    )  # fmt: skip
    parser.add_argument(
        "--check", action="store_true",
        help="only report what would change and what stops it; write no stream",
    )  # fmt: skip
    parser.add_argument(
        "--image", default=transform.DEFAULT_IMAGE,
        help=f"the kopf-csi image of the new container [{transform.DEFAULT_IMAGE}]",
    )  # fmt: skip
    parser.add_argument(
        "--measured-resources", action="store_true",
        help="scale the summed resources by kopf-csi's measured ratio (0.33x memory, 0.89x"
             " CPU) instead of keeping the sum",
    )  # fmt: skip


def _read(files: Sequence[str], stdin: TextIO) -> list[tuple[str, str]]:
    if not files:
        return [("<stdin>", stdin.read())]
    texts = []
    for name in files:
        if name == "-":
            texts.append(("<stdin>", stdin.read()))
            continue
        with open(name, encoding="utf-8") as file:
            texts.append((name, file.read()))
    return texts


def run(
    args: argparse.Namespace,
    *,
    prog: str = "kopf-csi migrate",
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    stdin, stdout, stderr = stdin or sys.stdin, stdout or sys.stdout, stderr or sys.stderr
    try:
        inputs = _read(args.files, stdin)
    except OSError as exc:
        print(f"{prog}: error: {exc.filename}: {exc.strerror}", file=stderr)
        return 2
    outputs, refused = [], False
    for source, text in inputs:
        try:
            if args.back:
                result = transform.back(text, source=source)
            else:
                result = transform.migrate(
                    text, image=args.image, ratio=args.measured_resources, source=source
                )
        except stream.StreamError as exc:
            print(f"{prog}: error: {exc}", file=stderr)
            return 2
        _report(result, back=args.back, check=args.check, out=stderr if not args.check else stdout)
        refused = refused or bool(result.refusals)
        outputs.append(result.text)
    if refused:
        print(f"{prog}: refused: nothing written (fix the above, or keep the Go sidecars)",
              file=stderr)  # fmt: skip
        return 1
    if not args.check:
        stdout.write("".join(outputs))
    return 0


def _report(result: transform.Result, *, back: bool, check: bool, out: TextIO) -> None:
    """What changed (or would): one line per workload and object, then the notes."""
    lines = []
    if result.refusals:
        lines += [f"refused: {refusal}" for refusal in result.refusals]
    elif back:
        lines += [f"restored: {done.workload}" for done in result.rewrites]
        lines += [f"left out: {_named(obj)}" for obj in result.rbac]
    else:
        for done in result.rewrites:
            for names, container in zip(done.replaced, done.containers, strict=True):
                lines.append(f"{done.workload}: {', '.join(names)} -> {container['name']}")
                lines.append(f"  args: {' '.join(container['args'])}")
        lines += [f"added: {_named(obj)}" for obj in result.rbac]
        lines += [f"note: {note}" for note in result.notes]
    if not lines:
        lines.append("nothing to change: no Go CSI controller sidecar found")
    if check and not result.refusals and result.changed:
        lines.insert(0, "would change:")
    print("\n".join(lines), file=out)


def _named(obj: dict[str, object]) -> str:
    meta = obj.get("metadata") or {}
    assert isinstance(meta, dict)
    where = f"{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{str(obj.get('kind')).lower()} {where}{meta.get('name')}"
