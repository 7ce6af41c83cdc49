"""`kopf-csi explain KIND/[NAMESPACE/]NAME`, also `kubectl csi explain ...` (`kubectl-csi`).

Exit codes: 0 healthy or done, 1 explained as blocked (or still waiting), 2 explain itself could
not work (a wrong name, no kubeconfig, an unreachable API: one line on stderr).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Mapping, Sequence
from typing import NoReturn

from kopf_csi.explain.observed import ExplainError
from kopf_csi.targets import Target, TargetError, parse_target

__all__ = ["add_arguments", "explain", "kubectl_main", "main"]

IN_WORK_AFTER = 60.0
"""`--in-work-after`'s default: `rules.IN_WORK_AFTER` (not imported: `kopf-csi --help` stays
quick), which says why a minute."""
DEFAULT_TIMEOUT = 10.0
"""Seconds explain waits for the API in all before it gives up (`--request-timeout`)."""


def operator_url(text: str) -> str:
    """`--operator`'s value: an http(s) URL. `host:port` alone would be taken for a URL whose
    scheme is `host` and fail later as "not reachable"; say what is missing instead."""
    scheme, _, rest = text.partition("://")
    if not rest:
        raise argparse.ArgumentTypeError(
            f"{text} is not a URL: http:// is missing (--operator http://{text})"
        )
    if scheme.lower() not in ("http", "https") or not rest.strip("/"):
        raise argparse.ArgumentTypeError(
            f"{text} is not an http:// URL (--operator http://HOST:PORT, the operator's"
            " --http-endpoint)"
        )
    return text


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise ExplainError(f"{message} (see {self.prog} --help)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """explain's arguments, on `kopf-csi explain` and on `kubectl-csi explain`."""
    parser.add_argument(
        "target",
        metavar="KIND/[NAMESPACE/]NAME",
        help="what to explain (one object): pvc, pv, va, vs, vsc or vgs (kubectl's names work"
        " too), like pvc/default/data",
    )
    parser.add_argument(
        "name",
        nargs="?",
        metavar="NAME",
        help="the name after a bare KIND, kubectl's way: `pvc data -n default`",
    )
    parser.add_argument("-n", "--namespace", help="the namespace when TARGET names none")
    parser.add_argument("--kubeconfig", help="the kubeconfig (else $KUBECONFIG, ~/.kube/config)")
    parser.add_argument("--context", help="the kubeconfig context (else its current one)")
    parser.add_argument(
        "-o", "--output", choices=("text", "json"), default="text", help="the output format"
    )
    parser.add_argument(
        "--operator",
        metavar="URL",
        type=operator_url,
        help="the operator's --http-endpoint (http://host:8080): adds what only it knows"
        " (its work queue, last error, journal, Leases)",
    )
    parser.add_argument(
        "--in-work-after", type=float, default=IN_WORK_AFTER, metavar="SECONDS",
        help="with --operator: an object the operator's worker has been on for longer is held"
        " in work (the verdict names what it waits on); raise it with the operator's --timeout"
        f" [{IN_WORK_AFTER:g}]",
    )  # fmt: skip
    parser.add_argument(
        "--request-timeout", type=float, default=DEFAULT_TIMEOUT, metavar="SECONDS",
        help=f"give up after this long in all [{DEFAULT_TIMEOUT:g}]",
    )  # fmt: skip


async def explain(args: argparse.Namespace, env: Mapping[str, str]) -> tuple[int, str]:
    """The exit code and the output (text or JSON) for parsed arguments."""
    from kopf_csi.explain import reading, rendering, rules  # late: `kopf-csi --help` stays quick

    if args.name is not None and "/" in args.target:
        raise ExplainError(
            f"one object at a time: KIND/[NAMESPACE/]NAME, or KIND NAME (given: {args.target}"
            f" {args.name})"
        )
    text = args.target if args.name is None else f"{args.target}/{args.name}"
    try:
        target = parse_target(text, default_namespace=args.namespace)
    except TargetError as exc:
        raise ExplainError(str(exc)) from None
    _refuse_two_namespaces(text, target, args.namespace)
    kubeconfig = reading.kubeconfig_path(args.kubeconfig, dict(env))
    api = await reading.connect(kubeconfig, args.context)
    try:
        async with asyncio.timeout(args.request_timeout):
            seen = await reading.read(api, target, server=api.server)
            if args.operator:
                await reading.read_operator(seen, args.operator)
    except TimeoutError:
        raise ExplainError(
            f"the Kubernetes API at {api.server} did not answer within {args.request_timeout:g}s"
        ) from None
    finally:
        await api.close()
    diagnosis = rules.diagnose(seen, in_work_after=args.in_work_after)
    render = rendering.as_json if args.output == "json" else rendering.as_text
    return diagnosis.exit_code, render(diagnosis)


def _refuse_two_namespaces(text: str, target: Target, namespace: str | None) -> None:
    """`pvc/team/data -n other` names two namespaces: refused rather than one silently
    winning (kubectl has no such form to copy)."""
    if namespace and target.namespace and target.namespace != namespace:
        kind, name = text.split("/")[0], target.name
        raise ExplainError(
            f"{text} names namespace {target.namespace}, -n names {namespace}: give one"
            f" ({kind}/{target.namespace}/{name}, or {kind}/{name} -n {namespace})"
        )


def run(args: argparse.Namespace, env: Mapping[str, str], *, prog: str) -> int:
    """Print the verdict (or the one-line error) and return the exit code."""
    from kopf_csi.explain import rendering

    try:
        code, output = asyncio.run(explain(args, env))
    except ExplainError as exc:
        if getattr(args, "output", "text") == "json":
            sys.stdout.write(rendering.error_json(str(exc)))
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(output)
    return code


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    """`kopf-csi explain ...` without the rest of kopf-csi's command line (for tests)."""
    parser = _Parser(prog="kopf-csi explain", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    return _parse_and_run(parser, argv, env)


def kubectl_main(argv: Sequence[str]) -> int:
    """`kubectl csi explain pvc/ns/data [--context ...]`: `argv` after `explain`."""
    parser = _Parser(prog="kubectl csi explain", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    return _parse_and_run(parser, argv, None, prog="kubectl csi explain")


def _parse_and_run(
    parser: argparse.ArgumentParser,
    argv: Sequence[str] | None,
    env: Mapping[str, str] | None,
    *,
    prog: str = "kopf-csi explain",
) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        args = parser.parse_args(argv)
    except ExplainError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    return run(args, os.environ if env is None else env, prog=prog)
