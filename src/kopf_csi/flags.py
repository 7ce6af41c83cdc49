"""The flag table: every setting's flag, environment variables, parser and description.

The table is derived from the `Settings` dataclasses, so a new group or field gets its flag
with no code here:

- the flag is the Go flag its docstring names (the first `` `--name` ``) while no earlier
  group took it, else the same name behind the group's name (`--attacher-timeout`); a field
  whose docstring names no flag gets `--<group>-<field>` (`--csi-connect-timeout`);
- the parser follows the field's type: `bool`, `int`, `str`, `str | None`, `Path | None`,
  `tuple[str, ...]`; a `float` is a duration in Go's syntax unless listed in `NUMBERS`;
- the description is the field's docstring.

The few exceptions are tables below: `NAMES`, `ALIASES`, `NUMBERS`, `SHARED`, `GO_DEFAULTS`.
Every flag also reads `KOPF_CSI_<FLAG>` from the environment (`--kube-api-qps` →
`KOPF_CSI_KUBE_API_QPS`). Which source wins, in order:

1. the setting's own flag, then its own variables (`KOPF_CSI_...` first, then any alias);
2. the shared flag it falls back to (`--timeout` for `--attacher-timeout`), then its variables;
3. the field's default.

Nothing here reads `os.environ` itself: callers pass the environment in.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import functools
import inspect
import itertools
import math
import pathlib
import re
import textwrap
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from kopf_csi.settings import Settings, SettingsError

__all__ = [
    "ENV_PREFIX",
    "RUN_ENV",
    "Flag",
    "Kind",
    "Resolved",
    "by_name",
    "describe",
    "description",
    "format_duration",
    "from_env",
    "parse_duration",
    "resolve",
    "table",
]

ENV_PREFIX = "KOPF_CSI_"

NAMES: Mapping[tuple[str, str], str] = {
    ("kube", "namespace"): "--pod-namespace",
    ("provisioner", "node_name"): "--node-name",
    ("workers", "attacher"): "--attacher-worker-threads",
    ("health", "enabled"): "--enable-health-monitor",
    ("resizer", "enabled"): "--enable-resizer",
    ("snapshotter", "enabled"): "--enable-snapshotter",
    # The Go resizer's own names, too vague beside the other sidecars' flags in one binary.
    ("resizer", "workers"): "--resizer-workers",
    ("resizer", "resync_period"): "--resizer-resync-period",
}
"""Flags that the derivation would name badly (no Go flag, a Go flag taken earlier, or one
too vague among all the sidecars' flags)."""

ALIASES: Mapping[tuple[str, str], tuple[str, ...]] = {
    ("csi", "address"): ("CSI_ADDRESS",),
    ("csi", "timeout"): ("CSI_TIMEOUT",),
    ("csi", "connect_timeout"): ("CSI_CONNECT_TIMEOUT",),
    ("kube", "kubeconfig"): ("KUBECONFIG",),
    ("kube", "namespace"): ("POD_NAMESPACE",),
    ("provisioner", "node_name"): ("NODE_NAME",),
    ("provisioner", "node_deployment"): ("NODE_DEPLOYMENT",),
}
"""Environment variables read besides `KOPF_CSI_<FLAG>`: the usual ones, and the old ones."""

NUMBERS: frozenset[tuple[str, str]] = frozenset({("kube", "qps")})
"""`float` fields that are plain numbers rather than durations."""

SHARED: Mapping[str, str] = {
    "timeout": "--timeout",
    "retry_interval_start": "--retry-interval-start",
    "retry_interval_max": "--retry-interval-max",
    "default_fstype": "--default-fstype",
    "extra_create_metadata": "--extra-create-metadata",
}
"""Field names that mean the same in every sidecar: a group's own flag for such a field
(`--attacher-timeout`) falls back to the shared one (`--timeout`) when not given. Worker counts
are not shared: the Go defaults differ tenfold (100 provisioner, 10 attacher workers)."""

GO_DEFAULTS: Mapping[tuple[str, str], tuple[str, str]] = {
    ("kube", "qps"): (
        "5",
        "About 3 API requests per volume: 5/s caps provisioning below 2 volumes/s, and every "
        "driver that scales raises it (external-provisioner #211, csi-wekafs #787).",
    ),
    ("kube", "burst"): (
        "10",
        "Raised with the QPS: 200 claims at once send about 700 requests per role, and the "
        "first 200 go without waiting.",
    ),
}
"""Defaults that differ from the Go sidecars' code defaults: (Go default, why)."""

RUN_ENV: Mapping[str, str] = {
    "KOPF_CSI_MODULES": "--module",
    "KOPF_CSI_LOG_LEVEL": "--log-level",
    "KOPF_CSI_LOG_FORMAT": "--log-format",
    "KOPF_CSI_LIVENESS": "--liveness",
    "KOPF_CSI_EVENT_LOOP": "--event-loop",
}
"""Variables of `kopf-csi run`'s own options (not settings): known, so not typos."""

IGNORED_PREFIXES = ("KOPF_CSI_BENCH_",)
"""Variables of our tools (benchmarks), not of the operator: never reported as unknown."""


@dataclasses.dataclass(frozen=True)
class Kind:
    """How the values of one type are written, parsed and shown."""

    name: str
    metavar: str
    parse: Callable[[str], Any]  # raises ValueError("<what is wrong>")
    show: Callable[[Any], str]


@dataclasses.dataclass(frozen=True)
class Flag:
    """One setting: where it lives in `Settings`, and how users set it."""

    group: str
    field: str
    name: str
    envs: tuple[str, ...]
    kind: Kind
    default: Any
    help: str
    shared: str | None = None
    go_default: tuple[str, str] | None = None

    @property
    def dest(self) -> str:
        return f"{self.group}.{self.field}"


@dataclasses.dataclass(frozen=True)
class Resolved:
    """The settings, and where each value that is not a default came from."""

    settings: Any  # Settings, or the `root` given to resolve()
    sources: Mapping[str, tuple[str, str]]  # dest -> (flag or variable, raw text)


# Durations as Go's time.ParseDuration reads them ("300ms", "1m30s", "-1.5h"); a bare number
# is seconds, as the environment variables always took.
_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0,
                   "m": 60.0, "h": 3600.0}  # fmt: skip
_DURATION_PART = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_DURATION = re.compile(rf"[-+]?(?:{_DURATION_PART.pattern})+")


def parse_duration(text: str) -> float:
    """Seconds from a Go duration (`10s`, `1m30s`, `300ms`) or a bare number of seconds."""
    raw = text.strip()
    try:
        seconds = float(raw)
    except ValueError:
        pass
    else:
        if math.isfinite(seconds):  # not "inf" or "nan", which float() also takes
            return seconds
        raise ValueError("is not a duration (like 10s, 1m30s, 300ms)")
    if not _DURATION.fullmatch(raw):
        raise ValueError("is not a duration (like 10s, 1m30s, 300ms)")
    seconds = sum(
        float(number) * _DURATION_UNITS[unit] for number, unit in _DURATION_PART.findall(raw)
    )
    return -seconds if raw.startswith("-") else seconds


def format_duration(seconds: float) -> str:
    """The shortest Go-style text for a duration: `10s`, `5m`, `1m30s`, `300ms`, `1h`."""
    if seconds < 0:
        return f"-{format_duration(-seconds)}"
    if seconds == 0:
        return "0s"
    if seconds < 1:
        return f"{seconds * 1000:g}ms"
    hours, rest = divmod(seconds, 3600)
    minutes, rest = divmod(rest, 60)
    parts = [f"{hours:g}h" if hours else "", f"{minutes:g}m" if minutes else ""]
    parts.append(f"{round(rest, 9):g}s" if rest else "")
    return "".join(parts)


def _positive_duration(text: str) -> float:
    seconds = parse_duration(text)
    if seconds <= 0:
        raise ValueError("must be more than zero")
    return seconds


def _positive_number(text: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise ValueError("is not a number") from None
    if not math.isfinite(value):
        raise ValueError("is not a number")
    if value <= 0:
        raise ValueError("must be more than zero")
    return value


def _integer(text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise ValueError("is not a whole number") from None


def _boolean(text: str) -> bool:
    word = text.strip().lower()
    if word in ("1", "t", "true", "yes", "on"):
        return True
    if word in ("0", "f", "false", "no", "off"):
        return False
    raise ValueError("is not a boolean (true or false)")


def _items(text: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in text.split(",") if item.strip())


def _show_text(value: Any) -> str:
    return str(value) if value else '""'


def _show_optional(value: Any) -> str:
    return '""' if value is None or value == "" else str(value)


DURATION = Kind("duration", "DURATION", _positive_duration, format_duration)
NUMBER = Kind("number", "NUMBER", _positive_number, lambda value: f"{value:g}")
INTEGER = Kind("integer", "N", _integer, str)
BOOLEAN = Kind("boolean", "BOOL", _boolean, lambda value: "true" if value else "false")
STRING = Kind("string", "TEXT", lambda text: text, _show_text)
OPTIONAL_STRING = Kind("string", "TEXT", lambda text: text or None, _show_optional)
PATH = Kind("path", "PATH", lambda text: pathlib.Path(text) if text else None, _show_optional)
ITEMS = Kind("list", "A,B,...", _items, lambda value: ",".join(value) or '""')

_KINDS: Mapping[Any, Kind] = {
    bool: BOOLEAN,
    int: INTEGER,
    float: DURATION,
    str: STRING,
    str | None: OPTIONAL_STRING,
    pathlib.Path | None: PATH,
    tuple[str, ...]: ITEMS,
}


def _kind(group: str, field: str, hint: Any) -> Kind:
    if (group, field) in NUMBERS:
        return NUMBER
    try:
        return _KINDS[hint]
    except (KeyError, TypeError):
        raise TypeError(
            f"Settings.{group}.{field}: no flag parser for {hint!r}; add one in kopf_csi.flags"
        ) from None


def _env_name(flag: str) -> str:
    return ENV_PREFIX + flag.removeprefix("--").upper().replace("-", "_")


@functools.cache
def docstrings(cls: type) -> Mapping[str, str]:
    """A dataclass's attribute docstrings (the string after each field), each on one line."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):  # no source (a frozen app): flags without descriptions
        return {}
    body = typing.cast(ast.ClassDef, ast.parse(source).body[0]).body
    found: dict[str, str] = {}
    for statement, following in itertools.pairwise(body):
        if (
            isinstance(statement, ast.AnnAssign)
            and isinstance(statement.target, ast.Name)
            and isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            found[statement.target.id] = " ".join(following.value.value.split())
    return found


_GO_FLAG = re.compile(r"`(--[a-z0-9][a-z0-9-]*)`")


def _default(field: dataclasses.Field[Any]) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    raise TypeError(f"{field.name}: every setting needs a default")


def _groups(root: type) -> Iterable[tuple[str, type]]:
    hints = typing.get_type_hints(root)
    for field in dataclasses.fields(root):
        cls = hints[field.name]
        if isinstance(cls, type) and dataclasses.is_dataclass(cls):
            yield field.name, cls


@functools.cache
def table(root: type = Settings) -> tuple[Flag, ...]:
    """Every setting's flag, in the order of `root`'s groups and their fields.

    `root` is `Settings`, or in tests a dataclass of the same shape (groups of settings).
    """
    flags: list[Flag] = []
    taken: dict[str, Flag] = {}
    for group, cls in _groups(root):
        prefix = f"--{group.replace('_', '-')}-"
        docs = docstrings(cls)
        hints = typing.get_type_hints(cls)
        for field in dataclasses.fields(cls):
            if not field.init:
                continue
            key = (group, field.name)
            help_text = docs.get(field.name, "")
            mentioned = _GO_FLAG.search(help_text)
            go_flag = mentioned.group(1) if mentioned else None
            if key in NAMES:
                name = NAMES[key]
            elif go_flag and go_flag not in taken:
                name = go_flag
            elif go_flag:
                name = prefix + go_flag.removeprefix("--")
            else:
                name = prefix + field.name.replace("_", "-")
            if name in taken:
                raise TypeError(f"Settings.{group}.{field.name}: {name} is taken; add to NAMES")
            kind = _kind(group, field.name, hints[field.name])
            shared = SHARED.get(field.name)
            flag = Flag(
                group=group,
                field=field.name,
                name=name,
                envs=(_env_name(name), *ALIASES.get(key, ())),
                kind=kind,
                default=_default(field),
                help=help_text,
                shared=shared if shared != name else None,
                go_default=GO_DEFAULTS.get(key),
            )
            flags.append(flag)
            taken[name] = flag
    for flag in flags:
        if flag.shared is not None:
            source = taken.get(flag.shared)
            if source is None or source.kind is not flag.kind:
                raise TypeError(f"{flag.name} cannot fall back to {flag.shared}")
    return tuple(flags)


def by_name(root: type = Settings) -> Mapping[str, Flag]:
    return {flag.name: flag for flag in table(root)}


def resolve(given: Mapping[str, str], env: Mapping[str, str], *, root: type = Settings) -> Resolved:
    """Settings from the flags given on the command line (`{"--timeout": "15s"}`) and `env`.

    Raises SettingsError naming the flag or variable and its value, for the first bad value.
    """
    _check_unknown(env, root)
    flags = by_name(root)
    unknown = set(given) - set(flags)
    if unknown:
        raise SettingsError(f"unknown flag {sorted(unknown)[0]}")
    values: dict[str, dict[str, Any]] = {}
    sources: dict[str, tuple[str, str]] = {}
    for flag in flags.values():
        found = _lookup(flag, given, env)
        if found is None and flag.shared is not None:
            found = _lookup(flags[flag.shared], given, env)
        if found is None:
            continue
        source, raw = found
        try:
            value = flag.kind.parse(raw)
        except ValueError as exc:
            raise SettingsError(f"{source}={raw!r} {exc}") from None
        values.setdefault(flag.group, {})[flag.field] = value
        sources[flag.dest] = found
    return Resolved(settings=_build(root, values, sources), sources=sources)


def from_env(env: Mapping[str, str]) -> Settings:
    """Settings from the environment alone: what handler modules use under a bare `kopf run`.

    The same table and parsers as `kopf-csi run`, without flags: `KOPF_CSI_<FLAG>` for every
    setting, and `CSI_ADDRESS`, `CSI_TIMEOUT`, `CSI_CONNECT_TIMEOUT`, `KUBECONFIG`,
    `POD_NAMESPACE`, `NODE_NAME`, `NODE_DEPLOYMENT`.
    """
    settings: Settings = resolve({}, env).settings
    return settings


def _lookup(flag: Flag, given: Mapping[str, str], env: Mapping[str, str]) -> tuple[str, str] | None:
    if flag.name in given:
        return flag.name, given[flag.name]
    for name in flag.envs:
        if env.get(name):  # empty means unset, as a manifest's `value: ""` would
            return name, env[name]
    return None


def _build(
    root: type, values: Mapping[str, Mapping[str, Any]], sources: Mapping[str, tuple[str, str]]
) -> Any:
    groups: dict[str, Any] = {}
    for group, cls in _groups(root):
        try:
            groups[group] = cls(**values.get(group, {}))
        except ValueError as exc:
            given = [
                f"{source}={raw!r}" for dest, (source, raw) in sources.items()
                if dest.startswith(f"{group}.")
            ]  # fmt: skip
            where = f" (given: {', '.join(given)})" if given else ""
            raise SettingsError(f"{exc}{where}") from None
    return root(**groups)


def _check_unknown(env: Mapping[str, str], root: type) -> None:
    """A misspelt `KOPF_CSI_` variable would be ignored silently: refuse it instead."""
    known = {name for flag in table(root) for name in flag.envs} | set(RUN_ENV)
    for name in sorted(env):
        if not name.startswith(ENV_PREFIX) or name in known:
            continue
        if name.startswith(IGNORED_PREFIXES):
            continue
        close = difflib.get_close_matches(name, sorted(known), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise SettingsError(f"unknown environment variable {name}{hint}")


_LEADING_GO_FLAG = re.compile(r"`(--[a-z0-9-]+)`(?: \(([^)]*)\))?[:;]\s*")


def description(flag: Flag, *, fallbacks: bool = False) -> str:
    """The docstring without its leading Go flag, saying where the Go flag's name differs,
    and which shared flag this one falls back to (or, with `fallbacks`, which fall back to it).
    """
    text = flag.help
    match = _LEADING_GO_FLAG.match(text)
    if match:
        text = text[match.end() :]
        text = text[:1].upper() + text[1:]
        go_flag, whose = match.group(1), f" ({match.group(2)})" if match.group(2) else ""
        if go_flag != flag.name or whose:
            text += f" Go flag: `{go_flag}`{whose}."
    if flag.shared:
        text += f" Falls back to `{flag.shared}`."
    users = [other.name for other in table() if other.shared == flag.name]
    if fallbacks and users:
        text += f" Also the default of {', '.join(f'`{name}`' for name in users)}."
    return text


def describe(resolved: Resolved) -> Sequence[str]:
    """The effective settings as `--flag=value` lines, each with where its value came from."""
    lines = []
    root: type = type(resolved.settings)
    for flag in table(root):
        group = getattr(resolved.settings, flag.group)
        value = flag.kind.show(getattr(group, flag.field))
        source = resolved.sources.get(flag.dest)
        origin = f"from {source[0]}" if source else "default"
        lines.append(f"{flag.name}={value}  # {origin}")
    return lines
