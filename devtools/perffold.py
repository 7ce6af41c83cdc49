"""Where a process's CPU went, by Python function: `perf script ... | python -m devtools.perffold`.

py-spy samples wall time, and on this project's VMs it cannot tell an idle thread from a busy
one; cProfile's overhead inflates small functions tenfold (docs/benchmarks.md). `perf` samples
CPU time only (`-e cpu-clock`), and Python 3.13 can name its own frames for it
(`PYTHON_PERF_JIT_SUPPORT=1`, unwound with DWARF). So, with the operator on a Python 3.13 venv
that has kopf-csi installed:

    PYTHON_PERF_JIT_SUPPORT=1 python -m devtools.bench --churn 20 --lifetime 30 --duration 90 \\
        --operator-python /path/to/py313/bin/python &
    sleep 30   # past the start
    perf record -k 1 -F 499 -e cpu-clock --call-graph dwarf,16384 \\
        -p "$(pgrep -f devtools.bench.operator)" -o perf.data -- sleep 60
    perf inject --jit -i perf.data -o perf.jit.data
    perf script -i perf.jit.data | python -m devtools.perffold --top 40

Each sample is charged to its innermost Python frame ("self": the C code that frame called,
orjson's or OpenSSL's, is its own) and to every Python frame on its stack ("inclusive").
`--callers NAME` says who called the function NAME, by the frames above it; `--callees NAME`
what it called, by the frames below it, and how much was its own ("(self)"). Python 3.13 spends
5-10 % more CPU than the image's 3.11 (docs/benchmarks.md), in much the same places.
Not part of the test suite's runs; its folding is tested (tests/test_perffold.py).
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import re
import sys
from collections.abc import Iterable, Iterator

Frame = tuple[str, str]
"""A Python frame: its function's qualified name, and its file (shortened)."""

_SAMPLE = re.compile(r"^\S.*?\s\d+\s+[\d.]+:\s+\d+\s+cpu-clock")
_PYTHON = re.compile(r"py::([^:]+):(\S+?)\+0x")
_ROOTS = ("site-packages/", "/src/", "/lib/python3.")


def stacks(lines: Iterable[str]) -> Iterator[list[str]]:
    """The samples of `perf script`'s output: each its frames' lines, innermost first."""
    stack: list[str] | None = None
    for line in lines:
        if _SAMPLE.match(line):
            if stack:
                yield stack
            stack = []
        elif not line.strip():
            if stack:
                yield stack
            stack = None
        elif stack is not None:
            stack.append(line.strip())
    if stack:
        yield stack


def short(path: str) -> str:
    """A file's path from its package on (`aiohttp/client.py`), or as it is."""
    for root in _ROOTS:
        if root in path:
            rest = path.split(root, 1)[1]
            return rest.split("/", 1)[1] if root == "/lib/python3." else rest
    return path


def python_frames(stack: Iterable[str]) -> list[Frame]:
    """The Python frames of one sample, innermost first."""
    return [(m.group(1), short(m.group(2))) for m in map(_PYTHON.search, stack) if m]


def package(frame: Frame) -> str:
    """The top-level package (or module) of a frame's file."""
    return frame[1].split("/", 1)[0].removesuffix(".py")


@dataclasses.dataclass
class Profile:
    samples: int = 0
    unnamed: int = 0  # samples with no Python frame at all (the kernel's, the loop's own C)
    self: collections.Counter[Frame] = dataclasses.field(default_factory=collections.Counter)
    inclusive: collections.Counter[Frame] = dataclasses.field(default_factory=collections.Counter)
    packages: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)

    def share(self, count: int) -> float:
        return 100.0 * count / self.samples if self.samples else 0.0


def fold(samples: Iterable[list[str]]) -> Profile:
    profile = Profile()
    for stack in samples:
        profile.samples += 1
        frames = python_frames(stack)
        if not frames:
            profile.unnamed += 1
            continue
        profile.self[frames[0]] += 1
        profile.packages[package(frames[0])] += 1
        profile.inclusive.update(set(frames))  # a recursive frame counts once
    return profile


def callers(samples: Iterable[list[str]], name: str, depth: int = 1) -> collections.Counter[str]:
    """Who called `name` (its qualified name), `depth` frames up, over the samples in it."""
    found: collections.Counter[str] = collections.Counter()
    for stack in samples:
        names = [frame[0] for frame in python_frames(stack)]
        if name in names:
            at = names.index(name)
            found[" <- ".join(names[at + 1 : at + 1 + depth]) or "(the root)"] += 1
    return found


def callees(samples: Iterable[list[str]], name: str, depth: int = 1) -> collections.Counter[str]:
    """What `name` called, `depth` frames down, over the samples in it ("(self)": in `name`
    itself, or in the C it called; a deeper chain cut short keeps the frames it has)."""
    found: collections.Counter[str] = collections.Counter()
    for stack in samples:
        names = [frame[0] for frame in python_frames(stack)]
        if name in names:
            at = len(names) - 1 - names[::-1].index(name)  # the outermost: recursion counts once
            below = names[max(at - depth, 0) : at][::-1]
            found[" -> ".join(below) or "(self)"] += 1
    return found


def report(profile: Profile, top: int) -> str:
    unnamed = profile.share(profile.unnamed)
    lines = [f"{profile.samples} samples; {unnamed:.1f} % with no Python frame"]
    lines.append("\nself, by package (the innermost Python frame's)")
    lines += [f"{profile.share(n):6.2f} %  {name}" for name, n in profile.packages.most_common(top)]
    lines.append("\nself, by function")
    lines += [f"{profile.share(n):6.2f} %  {f}  {p}" for (f, p), n in profile.self.most_common(top)]
    lines.append("\ninclusive, by function")
    lines += [
        f"{profile.share(n):6.2f} %  {f}  {p}" for (f, p), n in profile.inclusive.most_common(top)
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m devtools.perffold", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--top", type=int, default=40, help="rows per table (40)")
    parser.add_argument("--callers", metavar="NAME", help="who called NAME (`Class.method`)")
    parser.add_argument("--callees", metavar="NAME", help="what NAME called, and its self")
    parser.add_argument(
        "--depth", type=int, default=1, help="frames up or down, with --callers or --callees (1)"
    )
    args = parser.parse_args(argv)
    samples = list(stacks(sys.stdin))
    if args.callers or args.callees:
        total = len(samples)
        if args.callers:
            found = callers(samples, args.callers, args.depth)
        else:
            found = callees(samples, args.callees, args.depth)
        for chain, n in found.most_common(args.top):
            print(f"{100.0 * n / total:6.2f} %  {chain}")
    else:
        print(report(fold(samples), args.top))


if __name__ == "__main__":
    main()
