"""The `kopf-csi` command: `run` the operator, show its `config`, write its configuration `docs`.

`kopf-csi run` takes every setting as a flag named after the Go sidecars' (`--csi-address`,
`--timeout`, `--worker-threads`, ...) or as `KOPF_CSI_<FLAG>` in the environment; the table
lives in `kopf_csi.flags`, derived from `kopf_csi.settings`. It loads the default handler
modules plus the user's (`-m`), configures logging, and runs kopf cluster-wide in the main
thread, which gets SIGINT and SIGTERM. Exit codes: 0 after a clean stop, 1 when the operator
fails, 2 for bad flags, settings or module names (one line on stderr, no traceback).

Single-dash Go spellings (`-csi-address=/x`, `-v=5`) are accepted too, so the arguments of
the Go sidecars' containers can be moved over as they are.
"""

from __future__ import annotations

import argparse
import asyncio
import difflib
import logging
import os
import re
import signal
import sys
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from kopf_csi import flags, loops, modules
from kopf_csi.settings import Settings, SettingsError

__all__ = ["UsageError", "kubectl_main", "main", "reference", "settings_for"]

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
LOG_FORMATS = ("auto", "json", "console")
COMMANDS = ("run", "config", "docs", "explain", "rbac", "migrate")


class UsageError(Exception):
    """Bad command-line input: reported in one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    """argparse, but its errors are ours (one line, exit code 2), and no abbreviations.

    Go's flag package takes no abbreviations either: `--time=5s` must not become `--timeout`.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **{"allow_abbrev": False, **kwargs})

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see {self.prog} --help)")


def _add_settings(parser: argparse.ArgumentParser) -> None:
    groups: dict[str, Any] = {}
    for flag in flags.table():
        if flag.group not in groups:
            groups[flag.group] = parser.add_argument_group(f"{flag.group} settings")
        help_text = flags.description(flag).replace("%", "%%")
        extra = {"nargs": "?", "const": "true"} if flag.kind is flags.BOOLEAN else {}
        groups[flag.group].add_argument(
            flag.name,
            dest=flag.dest,
            metavar=flag.kind.metavar,
            default=argparse.SUPPRESS,  # absent flags stay absent: the environment may set them
            help=f"{help_text} [{flag.kind.show(flag.default)}; ${flag.envs[0]}]",
            **extra,
        )


_RUN_OPTIONS: tuple[tuple[tuple[str, ...], dict[str, Any]], ...] = (
    (("-m", "--module"), {
        "dest": "modules", "action": "append", "metavar": "MODULE", "default": None,
        "help": "A handler module to load after the defaults: a dotted name (found from the"
                " current directory too, as with python -m) or a .py file. Repeat it for more;"
                " the variable takes a comma-separated list.",
    }),
    (("--no-default-modules",), {
        "action": "store_true",
        "help": "Load only the -m modules, not the defaults"
                f" ({', '.join(modules.DEFAULT_MODULES)}); kopf_csi_handlers.lifecycle (the API"
                " login, the CSI driver, the caches) must be among them.",
    }),
    (("--log-level",), {
        "type": str.upper, "choices": LOG_LEVELS, "default": None,
        "help": "The lowest level logged (INFO when not given).",
    }),
    (("--log-format",), {
        "choices": LOG_FORMATS, "default": None,
        "help": "JSON lines or console lines; auto (the default): console lines on a terminal.",
    }),
    (("--v",), {
        "dest": "verbosity", "type": int, "default": None, "metavar": "N",
        "help": "klog's verbosity, so that the Go sidecars' arguments work: 4 or more means"
                " --log-level=DEBUG (which wins when given).",
    }),
    (("--event-loop",), {
        "choices": loops.CHOICES, "default": None,
        "help": "The event loop: uvloop's (less CPU per request) or asyncio's own; auto (the"
                " default): uvloop where it is installed.",
    }),
    (("--liveness",), {
        "metavar": "URL", "default": None,
        "help": "kopf's liveness endpoint, like http://0.0.0.0:8081/healthz (off when not given).",
    }),
)  # fmt: skip
"""`kopf-csi run`'s own options; `flags.RUN_ENV` names the variables of some of them."""


def _run_env(names: Sequence[str]) -> str | None:
    return next((env for env, option in flags.RUN_ENV.items() if option in names), None)


def _add_run_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("run options (not settings)")
    for names, options in _RUN_OPTIONS:
        env = _run_env(names)
        help_text = options["help"] + (f" [${env}]" if env else "")
        group.add_argument(*names, **{**options, "help": help_text.replace("%", "%%")})


def _build_parser() -> _Parser:
    parser = _Parser(prog="kopf-csi", description=__doc__.split("\n\n")[0] if __doc__ else None)
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    run = commands.add_parser(
        "run", help="run the operator",
        usage="%(prog)s [SETTING FLAGS] [-m MODULE ...] [--no-default-modules] [OPTIONS]",
        description="Run the CSI controller sidecars as one kopf operator.",
    )  # fmt: skip
    _add_settings(run)
    _add_run_options(run)
    config = commands.add_parser(
        "config", help="print the effective settings as flags, and where each came from",
        usage="%(prog)s [the arguments of run]",
        description="Print the settings `run` would use with the same arguments and environment.",
    )  # fmt: skip
    _add_settings(config)
    _add_run_options(config)
    docs = commands.add_parser("docs", help="print the configuration reference (Markdown)")
    docs.add_argument("--output", metavar="FILE", help="write it to FILE instead")
    _add_explain(commands)
    _add_rbac(commands)
    _add_migrate(commands)
    return parser


def _add_rbac(commands: Any) -> None:
    """`kopf-csi rbac -m MODULE`: the ClusterRole and Role the modules declare (`api.rbac`)."""
    from kopf_csi import rbac

    command = commands.add_parser(
        "rbac", help="print the RBAC that handler modules declare, as YAML",
        description="Print the ClusterRole and Role (with their bindings to the operator's"
        " ServiceAccount) that the handler modules declare with api.rbac.declare().",
    )  # fmt: skip
    command.add_argument(
        "-m", "--module", dest="modules", action="append", required=True, metavar="MODULE",
        help="a handler module (dotted name or file path), as for run; repeatable",
    )  # fmt: skip
    command.add_argument("--namespace", default=rbac.NAMESPACE, help="the operator's namespace")
    command.add_argument(
        "--service-account", default=rbac.ACCOUNT, help="the operator's ServiceAccount"
    )


def _rbac(args: argparse.Namespace) -> int:
    from kopf_csi import rbac

    try:
        declared = modules.declared_rbac(args.modules)
    except modules.ModuleLoadError as exc:
        raise UsageError(str(exc)) from None
    if not declared:
        print(f"# {', '.join(args.modules)}: no RBAC declared (api.rbac.declare)")
        return 0
    account = {"namespace": args.namespace, "account": args.service_account}
    sys.stdout.write(rbac.to_yaml(declared, **account))
    return 0


def _add_explain(commands: Any) -> None:
    """`kopf-csi explain`: its arguments live with it (`kopf_csi.explain.command`)."""
    from kopf_csi.explain import command

    explain = commands.add_parser(
        "explain", help=KUBECTL_COMMANDS["explain"],
        description=command.__doc__.split("\n\n")[0] if command.__doc__ else None,
    )  # fmt: skip
    command.add_arguments(explain)


def _add_migrate(commands: Any) -> None:
    """`kopf-csi migrate`: its arguments live with it (`kopf_csi.migration.command`)."""
    from kopf_csi.migration import command

    migrate = commands.add_parser(
        "migrate", help=KUBECTL_COMMANDS["migrate"],
        description=command.__doc__.split("\n\n")[0] if command.__doc__ else None,
    )  # fmt: skip
    command.add_arguments(migrate)


KUBECTL_COMMANDS = {
    "explain": "say why a claim, volume, attachment or snapshot is stuck",
    "migrate": "rewrite a driver's manifests from the Go sidecars to kopf-csi, or back",
}
"""The `kubectl csi` commands (also `kopf-csi`'s), with their one-line help."""


def kubectl_usage() -> str:
    """What `kubectl csi` alone (or with `--help`) prints: its commands, one a line."""
    width = max(map(len, KUBECTL_COMMANDS))
    lines = ["usage: kubectl csi COMMAND ...", "", "kopf-csi's kubectl plugin. Commands:"]
    lines += [f"  {name:<{width}}  {text}" for name, text in KUBECTL_COMMANDS.items()]
    lines += ["", "kubectl csi COMMAND --help says more."]
    return "\n".join(lines) + "\n"


def kubectl_main() -> None:
    """The `kubectl-csi` plugin: `kubectl csi explain ...` or `kubectl csi migrate ...`;
    alone, `--help` or an unknown command: its usage (exit 0 for `--help`, else 2)."""
    given = sys.argv[1] if len(sys.argv) > 1 else None
    if given == "explain":
        from kopf_csi.explain import command as explain

        sys.exit(explain.kubectl_main(sys.argv[2:]))
    if given != "migrate":
        if given in ("-h", "--help"):
            sys.stdout.write(kubectl_usage())
            sys.exit(0)
        if given is not None:
            print(f"kubectl csi: error: unknown command {given!r}", file=sys.stderr)
        sys.stderr.write(kubectl_usage())
        sys.exit(2)
    from kopf_csi.migration import command

    parser = _Parser(prog="kubectl csi migrate", description=command.__doc__)
    command.add_arguments(parser)
    try:
        args = parser.parse_args(sys.argv[2:])
    except UsageError as exc:
        print(f"kubectl csi migrate: error: {exc}", file=sys.stderr)
        sys.exit(2)
    sys.exit(command.run(args, prog="kubectl csi migrate"))


def _go_spellings(argv: Sequence[str], parser: argparse.ArgumentParser) -> list[str]:
    """`-csi-address=/x` → `--csi-address=/x`, as Go's flag package takes either spelling."""
    known = {
        option
        for action in _subcommand_actions(parser)
        for option in action.option_strings
        if option.startswith("--")
    }
    result: list[str] = []
    for index, arg in enumerate(argv):
        if arg == "--":
            return result + list(argv[index:])
        name = arg.partition("=")[0]
        if re.fullmatch(r"-[a-z][a-z0-9-]*", name) and f"-{name}" in known:
            arg = f"-{arg}"
        result.append(arg)
    return result


def _subcommand_actions(
    parser: argparse.ArgumentParser, command: str | None = None
) -> list[argparse.Action]:
    """The options of every subcommand, or of `command`'s only."""
    actions: list[argparse.Action] = []
    for action in parser._actions:  # argparse has no public API to list subparsers
        if isinstance(action, argparse._SubParsersAction):
            for name, subparser in action.choices.items():
                if command is None or name == command:
                    actions.extend(subparser._actions)
    return actions


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace:
    args, unknown = parser.parse_known_args(_go_spellings(argv, parser))
    if unknown:
        raise UsageError(_unrecognized(unknown, parser, args.command))
    return args


def _unrecognized(unknown: Sequence[str], parser: argparse.ArgumentParser, command: str) -> str:
    known = sorted(
        option
        for action in _subcommand_actions(parser, command)  # not another command's options
        for option in action.option_strings
    )
    first = unknown[0].partition("=")[0]
    close = difflib.get_close_matches(first, known, n=1) if first.startswith("-") else []
    hint = f"; did you mean {close[0]}?" if close else ""
    return f"unrecognized arguments: {' '.join(unknown)}{hint} (see kopf-csi {command} --help)"


def _given(args: argparse.Namespace) -> dict[str, str]:
    values = vars(args)
    return {flag.name: values[flag.dest] for flag in flags.table() if flag.dest in values}


def _modules(args: argparse.Namespace, env: Mapping[str, str]) -> list[str]:
    extra = args.modules
    if extra is None:
        extra = [name.strip() for name in env.get("KOPF_CSI_MODULES", "").split(",")]
    extra = [name for name in extra if name]
    defaults = [] if args.no_default_modules else list(modules.DEFAULT_MODULES)
    chosen = defaults + [name for name in extra if name not in defaults]
    if not chosen:
        raise UsageError("no handler modules to run: give -m MODULE, or keep the defaults")
    return chosen


def _log_level(args: argparse.Namespace, env: Mapping[str, str]) -> str:
    if args.log_level:
        return str(args.log_level)
    if args.verbosity is not None:
        return "DEBUG" if args.verbosity >= 4 else "INFO"
    level = env.get("KOPF_CSI_LOG_LEVEL", "").upper() or "INFO"
    if level not in LOG_LEVELS:
        raise UsageError(f"KOPF_CSI_LOG_LEVEL={level!r} is not one of {', '.join(LOG_LEVELS)}")
    return level


def _log_json(args: argparse.Namespace, env: Mapping[str, str]) -> bool | None:
    chosen = args.log_format or env.get("KOPF_CSI_LOG_FORMAT", "").lower() or "auto"
    if chosen not in LOG_FORMATS:
        raise UsageError(f"KOPF_CSI_LOG_FORMAT={chosen!r} is not one of {', '.join(LOG_FORMATS)}")
    return None if chosen == "auto" else chosen == "json"


def _event_loop(args: argparse.Namespace, env: Mapping[str, str]) -> str:
    chosen = args.event_loop or env.get("KOPF_CSI_EVENT_LOOP", "").lower() or "auto"
    if chosen not in loops.CHOICES:
        raise UsageError(f"KOPF_CSI_EVENT_LOOP={chosen!r} is not one of {', '.join(loops.CHOICES)}")
    if chosen == "uvloop" and not loops.available():
        raise UsageError("--event-loop=uvloop: uvloop is not installed here (auto falls back)")
    return chosen


def settings_for(args: Sequence[str], env: Mapping[str, str]) -> Settings:
    """The settings `kopf-csi run <args>` would run with in `env` (for manifests' tests).

    Raises UsageError or SettingsError, as `run` would report them.
    """
    settings: Settings = flags.resolve(
        _given(_parse(_build_parser(), ["run", *args])), env
    ).settings
    return settings


def _run(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    import kopf  # late: `kopf-csi docs` and `--help` need none of kopf's start-up cost
    import structlog

    from kopf_csi import logs, runtime

    resolved = flags.resolve(_given(args), env)
    _check_kubeconfig(resolved)
    names = _modules(args, env)
    liveness = args.liveness or env.get("KOPF_CSI_LIVENESS") or None
    event_loop = _event_loop(args, env)
    logs.configure(level=_log_level(args, env), json=_log_json(args, env))
    logs.quiet_reported_failures()  # `_operate` reports the failed start-up handlers itself
    log = structlog.get_logger("kopf_csi.cli")
    registry = kopf.OperatorRegistry()
    try:
        modules.load(names, registry=registry)
    except modules.ModuleLoadError as exc:
        raise UsageError(str(exc)) from None
    except Exception as exc:
        log.exception("module_failed_to_load", **modules.failure(exc))
        return 1
    if not runtime.logs_in(registry):
        raise UsageError(
            "no handler module logs in to Kubernetes: add -m kopf_csi_handlers.lifecycle"
            " (the API login, the CSI driver and the caches) to --no-default-modules"
        )
    loop = loops.new_event_loop(event_loop)
    log.info(
        "operator_starting", modules=names, settings_given=sorted(resolved.sources),
        event_loop=loops.name(loop),
    )  # fmt: skip
    return _operate(registry, resolved.settings, liveness=liveness, loop=loop)


def _check_kubeconfig(resolved: flags.Resolved) -> None:
    """A kubeconfig given (`--kubeconfig`, `KUBECONFIG`) that names no file is a bad value, said
    at once: kubernetes-asyncio would only warn, and then fail to log in with a misleading text
    ("Expected key current-context"). `KUBECONFIG` may list several files, as for kubectl."""
    from kopf_csi import kube

    given = resolved.settings.kube.kubeconfig
    if given is None or kube.kubeconfig_files(str(given)):
        return
    source, raw = resolved.sources.get("kube.kubeconfig", ("--kubeconfig", str(given)))
    raise UsageError(f"{source}={raw!r} is not a kubeconfig file: no such file")


def _operate(
    registry: Any, settings: Any, *, liveness: str | None, loop: asyncio.AbstractEventLoop
) -> int:
    """kopf in this (the main) thread, on a loop of our own, so that it gets the signals.

    `memo.stop_operator(reason)` lets the operator stop itself (`runtime.request_stop`: a lost
    Lease): that ends with exit code 1, as the Go sidecars exit with an error then.
    """
    import kopf
    import structlog

    from kopf_csi import runtime

    log = structlog.get_logger("kopf_csi.cli")
    reasons: list[str] = []

    def stop_operator(reason: str) -> None:  # from any thread
        # A signal, as from outside, rather than kopf's `stop_flag`: kopf waits for that flag
        # in a task of its own, which a signal or a failed start-up leaves waiting, and then
        # gives that "hung" task 5 s before it exits (SIGTERM to an idle operator took 5.5 s).
        reasons.append(reason)
        loop.call_soon_threadsafe(signal_kopf)

    def signal_kopf() -> None:
        if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:  # kopf's handler is not there yet
            loop.call_later(0.01, signal_kopf)
        else:
            os.kill(os.getpid(), signal.SIGTERM)

    memo = runtime.OperatorMemo(settings=settings, registry=registry, stop_operator=stop_operator)
    kopf.on.cleanup(registry=registry, id="kopf-csi.unfinished-scan")(_cancel_unfinished_scan)
    try:
        kopf.run(
            loop=loop,
            registry=registry,
            memo=memo,
            clusterwide=True,
            standalone=True,
            liveness_endpoint=liveness,
        )
    except Exception as exc:
        failed = _failed_handlers(exc)
        if failed:  # one line per start-up handler that failed, with why (kopf's: debug)
            for handler, error in failed.items():
                log.error("operator_failed", handler=handler, error=error)  # noqa: TRY400
        else:
            log.exception("operator_failed", error=str(exc) or repr(exc))
        return 1
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.run_until_complete(loop.shutdown_default_executor())
        loop.close()
    if reasons:
        log.error("operator_stopped_itself", reason=reasons[0])
        return 1
    log.info("operator_stopped")
    return 0


async def _cancel_unfinished_scan(**_: Any) -> None:
    """Cancel kopf's discovery of the API's resources if a stop comes before it has finished.

    kopf 1.45 reads each API group in a task of its own (`asyncio.as_completed`) that the
    cancelled scan leaves running: they retry against the closed connection until kopf gives
    such "hung" tasks 5 s (a SIGTERM just after start-up took 5.3 s, with error lines)."""
    scanning = "kopf/_cogs/clients/scanning.py"
    for task in asyncio.all_tasks():
        code = getattr(task.get_coro(), "cr_code", None)
        if code is not None and code.co_filename.replace("\\", "/").endswith(scanning):
            task.cancel()


def _failed_handlers(exc: Exception) -> dict[str, str]:
    """The handlers behind kopf's ActivityError ("One or more handlers failed"), and why; not
    the controllers that did not start because another handler failed (`runtime.NotStarted`)."""
    from kopf_csi import runtime

    outcomes = getattr(exc, "outcomes", None)  # ActivityError is not in kopf's public API
    if not isinstance(outcomes, dict):
        return {}
    failed = {
        str(handler): outcome.exception
        for handler, outcome in outcomes.items()
        if getattr(outcome, "exception", None) is not None
    }
    causes = {h: e for h, e in failed.items() if not isinstance(e, runtime.NotStarted)}
    return {handler: str(error) for handler, error in (causes or failed).items()}


def _config(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    resolved = flags.resolve(_given(args), env)
    _check_kubeconfig(resolved)  # what `run` would refuse, `config` refuses the same way
    names = _modules(args, env)
    level, json = _log_level(args, env), _log_json(args, env)
    print("\n".join(flags.describe(resolved)))
    print(f"# handler modules: {', '.join(names)}")
    print(
        f"# log level: {level}, format: {'auto' if json is None else 'json' if json else 'console'}"
    )
    return 0


def _docs(args: argparse.Namespace) -> int:
    text = reference()
    if args.output:
        with open(args.output, "w", encoding="utf-8") as file:
            file.write(text)
    else:
        sys.stdout.write(text)
    return 0


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> None:
    """The `kopf-csi` console script; `argv` and `env` are for tests."""
    argv = sys.argv[1:] if argv is None else argv
    env = os.environ if env is None else env
    parser = _build_parser()
    try:
        args = _parse(parser, argv)
        if args.command == "run":
            code = _run(args, env)
        elif args.command == "config":
            code = _config(args, env)
        elif args.command == "explain":
            from kopf_csi.explain import command as explain

            code = explain.run(args, env, prog="kopf-csi explain")
        elif args.command == "rbac":
            code = _rbac(args)
        elif args.command == "migrate":
            from kopf_csi.migration import command as migration

            code = migration.run(args)
        else:
            code = _docs(args)
    except (UsageError, SettingsError) as exc:
        command = next((arg for arg in argv if arg in COMMANDS), None)
        prog = f"kopf-csi {command}" if command else "kopf-csi"
        print(f"{prog}: error: {exc}", file=sys.stderr)
        code = 2
    logging.shutdown()
    sys.exit(code)


# The configuration reference (docs/configuration.md), written from the same table as the
# flags, so that it cannot drift from them. A test fails when the committed file is stale.

_PREAMBLE = """\
# Configuration reference

<!-- Generated by `kopf-csi docs --output docs/configuration.md` from the settings
     (src/kopf_csi/settings.py and each sidecar's options.py). Do not edit by hand:
     tests/cli/test_reference.py fails when this file is stale. -->

`kopf-csi run` takes every setting as a flag or as an environment variable:

- Flags: `--name=value` or `--name value`; Go's single-dash spelling (`-name=value`) works
  too, so the Go sidecars' container arguments can be moved over as they are. A boolean flag
  alone means true (`--leader-election`); `--leader-election=false` turns it off.
- Environment: `KOPF_CSI_<FLAG>` for every flag (`--kube-api-qps` → `KOPF_CSI_KUBE_API_QPS`),
  plus the few usual variables listed below (`CSI_ADDRESS`, `KUBECONFIG`, `POD_NAMESPACE`,
  `NODE_NAME`, ...). An empty variable counts as unset. A `KOPF_CSI_` variable that names no
  setting is an error, so that a typo is never ignored silently.
- Which wins: the setting's own flag, then its own variables (`KOPF_CSI_...` first), then the
  shared flag it falls back to (below), then the shared flag's variables, then the default.
- Durations take Go's syntax (`300ms`, `10s`, `1m30s`, `1h`) or a number of seconds (`10`).
  Booleans: `true`/`false`, `1`/`0`, `yes`/`no`, `on`/`off`.
- Bad values stop `kopf-csi run` with exit code 2 and one line naming the flag or variable
  and the value. `kopf-csi config` prints the effective settings as flags, each with its source.

**Flags shared by several sidecars.** Where the Go sidecars each have a flag of the same name
and meaning (`--timeout`, `--retry-interval-start`, `--retry-interval-max`,
`--default-fstype`, `--extra-create-metadata`), the plain flag is the provisioner's (or, for
`--timeout`, every CSI call's), and each other sidecar has its own prefixed flag
(`--attacher-timeout`) that falls back to the plain one when not given, and to its own Go
default when neither is. Worker counts are not shared: `--worker-threads` is the provisioner's
(Go: 100), `--attacher-worker-threads` the attacher's (Go: 10).

Handler modules run under a bare `kopf run` (no `kopf-csi`) read the same variables, with the
same parsers and errors (`kopf_csi.flags.from_env()`); a bad value fails the start-up handlers
permanently, and kopf exits with its report of them (not a retry every minute).
"""


def _plain(text: str) -> str:
    return text.replace("|", "\\|")


def reference() -> str:
    """The configuration reference in Markdown."""
    lines = [_PREAMBLE]
    differing = [flag for flag in flags.table() if flag.go_default]
    lines += ["## Defaults that differ from the Go sidecars", ""]
    lines += ["| Flag | Here | Go | Why |", "|---|---|---|---|"]
    for flag in differing:
        assert flag.go_default is not None
        go, why = flag.go_default
        shown = flag.kind.show(flag.default)
        lines.append(f"| `{flag.name}` | `{shown}` | `{go}` | {_plain(why)} |")
    if not differing:
        lines.append("| (none) | | | |")
    group = None
    for flag in flags.table():
        if flag.group != group:
            group = flag.group
            lines += ["", f"## `{group}` settings (`Settings.{group}`)", ""]
            lines += ["| Flag | Environment | Default | Description |", "|---|---|---|---|"]
        envs = "<br>".join(f"`{name}`" for name in flag.envs)
        default = f"`{flag.kind.show(flag.default)}`"
        if flag.go_default:
            default += f" (Go: `{flag.go_default[0]}`)"
        text = _plain(flags.description(flag, fallbacks=True))
        lines.append(f"| `{flag.name}` | {envs} | {default} | {text} |")
    lines += ["", "## Options of `kopf-csi run` (not settings)", ""]
    lines += ["| Option | Environment | Description |", "|---|---|---|"]
    for names, options in _RUN_OPTIONS:
        env = _run_env(names)
        shown = ", ".join(f"`{name}`" for name in names)
        lines.append(f"| {shown} | {f'`{env}`' if env else ''} | {_plain(options['help'])} |")
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
