"""The Go sidecars' flags → `kopf-csi run`'s, or a refusal naming the container and the flag.

Pure: containers' arguments in, flags out. For each role, `TABLES` says what each Go flag
becomes:

- `own`: a per-role setting, under kopf-csi's name for that role (the attacher's `--timeout` is
  `--attacher-timeout`, the resizer's `--workers` is `--resizer-workers`);
- `shared`: one setting for every role (`--kube-api-qps`, `--leader-election...`,
  `--metrics-path`, `--kubeconfig`): every sidecar must have the same value, a flag left out
  counting as its Go default, or the mapping refuses;
- `fixed`: a Go knob kopf-csi does not have; accepted only with the value that means what
  kopf-csi does (`--capacity-threads=1`), and then left out;
- `gates`: `--feature-gates`, each gate accepted only as kopf-csi behaves (`Topology=true`),
  `CSIVolumeGroupSnapshot` becoming `--enable-volume-group-snapshots`;
- the endpoint (`--http-endpoint`, `--metrics-address`): kopf-csi serves one, the first
  role's; `--v`: the highest; `--csi-address`: the group's socket.

Any other flag is refused. So is a flag that lost its meaning in the merge: a per-role setting
that kopf-csi's shared fallback (`--timeout` for `--attacher-timeout`) would change for a role
that did not set it gets that role's Go default written out, so that no role's value changes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kopf_csi import flags
from kopf_csi.modules import DEFAULT_MODULES

__all__ = ["TABLES", "Entry", "Plan", "Refusal", "Sidecar", "parse_args", "plan"]


@dataclasses.dataclass(frozen=True)
class Entry:
    how: str  # own | shared | fixed | gates | http | verbosity | address
    target: str | None = None  # kopf-csi's flag (own, shared)
    go_default: str | None = None  # the Go default (shared), to compare sidecars that omit it
    accepted: tuple[str, ...] = ()  # fixed: the values that mean kopf-csi's behaviour
    kind: flags.Kind | None = None  # fixed: how to read the value
    boolean: bool = False


def _own(target: str) -> Entry:
    kind = flags.by_name()[target].kind
    return Entry("own", target, boolean=kind is flags.BOOLEAN)


def _shared(target: str, go_default: str) -> Entry:
    kind = flags.by_name()[target].kind
    return Entry("shared", target, go_default=go_default, boolean=kind is flags.BOOLEAN)


def _fixed(kind: flags.Kind, *accepted: str) -> Entry:
    return Entry("fixed", accepted=accepted, kind=kind, boolean=kind is flags.BOOLEAN)


_COMMON: Mapping[str, Entry] = {
    "csi-address": Entry("address"),
    "kubeconfig": _shared("--kubeconfig", ""),
    "kube-api-qps": _shared("--kube-api-qps", "5"),
    "kube-api-burst": _shared("--kube-api-burst", "10"),
    "leader-election": _shared("--leader-election", "false"),
    "leader-election-namespace": _shared("--leader-election-namespace", ""),
    "leader-election-lease-duration": _shared("--leader-election-lease-duration", "15s"),
    "leader-election-renew-deadline": _shared("--leader-election-renew-deadline", "10s"),
    "leader-election-retry-period": _shared("--leader-election-retry-period", "5s"),
    "http-endpoint": Entry("http"),
    "metrics-address": Entry("http"),
    "metrics-path": _shared("--metrics-path", "/metrics"),
    "v": Entry("verbosity"),
    "feature-gates": Entry("gates"),
    "enable-pprof": _fixed(flags.BOOLEAN, "false"),
}

TABLES: Mapping[str, Mapping[str, Entry]] = {
    "provisioner": {
        **_COMMON,
        "timeout": _own("--timeout"),
        "worker-threads": _own("--worker-threads"),
        "retry-interval-start": _own("--retry-interval-start"),
        "retry-interval-max": _own("--retry-interval-max"),
        "volume-name-prefix": _own("--volume-name-prefix"),
        "volume-name-uuid-length": _own("--volume-name-uuid-length"),
        "default-fstype": _own("--default-fstype"),
        "extra-create-metadata": _own("--extra-create-metadata"),
        "strict-topology": _own("--strict-topology"),
        "immediate-topology": _own("--immediate-topology"),
        "controller-publish-readonly": _own("--controller-publish-readonly"),
        "prevent-volume-mode-conversion": _own("--prevent-volume-mode-conversion"),
        "node-deployment": _own("--node-deployment"),
        "node-deployment-immediate-binding": _own("--node-deployment-immediate-binding"),
        "node-deployment-base-delay": _own("--node-deployment-base-delay"),
        "node-deployment-max-delay": _own("--node-deployment-max-delay"),
        "enable-capacity": _own("--enable-capacity"),
        "capacity-poll-interval": _own("--capacity-poll-interval"),
        "capacity-for-immediate-binding": _own("--capacity-for-immediate-binding"),
        "capacity-threads": _fixed(flags.INTEGER, "1"),
        "capacity-ownerref-level": _fixed(flags.INTEGER, "-1"),  # kopf-csi sets no owner
        "cloning-protection-threads": _fixed(flags.INTEGER, "1"),
        "snapshot-orphan-sweep-interval": _fixed(flags.DURATION, "5m"),
    },
    "attacher": {
        **_COMMON,
        "timeout": _own("--attacher-timeout"),
        "worker-threads": _own("--attacher-worker-threads"),
        "retry-interval-start": _own("--attacher-retry-interval-start"),
        "retry-interval-max": _own("--attacher-retry-interval-max"),
        "default-fstype": _own("--attacher-default-fstype"),
        "reconcile-sync": _own("--reconcile-sync"),
        "max-entries": _own("--max-entries"),
        "resync": _fixed(flags.DURATION, "10m"),
    },
    "resizer": {
        **_COMMON,
        "timeout": _own("--resizer-timeout"),
        "workers": _own("--resizer-workers"),
        "retry-interval-start": _own("--resizer-retry-interval-start"),
        "retry-interval-max": _own("--resizer-retry-interval-max"),
        "resync-period": _own("--resizer-resync-period"),
        "handle-volume-inuse-error": _own("--handle-volume-inuse-error"),
        "extra-modify-metadata": _own("--extra-modify-metadata"),
    },
    "snapshotter": {
        **_COMMON,
        "timeout": _own("--snapshotter-timeout"),
        "worker-threads": _own("--snapshotter-worker-threads"),
        "retry-interval-start": _own("--snapshotter-retry-interval-start"),
        "retry-interval-max": _own("--snapshotter-retry-interval-max"),
        "resync-period": _own("--resync-period"),
        "snapshot-name-prefix": _own("--snapshot-name-prefix"),
        "snapshot-name-uuid-length": _own("--snapshot-name-uuid-length"),
        "extra-create-metadata": _own("--snapshotter-extra-create-metadata"),
        "enable-volume-group-snapshots": _own("--enable-volume-group-snapshots"),
        "groupsnapshot-name-prefix": _own("--groupsnapshot-name-prefix"),
        "groupsnapshot-name-uuid-length": _own("--groupsnapshot-name-uuid-length"),
    },
    "health": {
        **_COMMON,
        "timeout": _own("--health-timeout"),
        "worker-threads": _own("--health-worker-threads"),
        "monitor-interval": _own("--monitor-interval"),
        "list-volumes-interval": _own("--list-volumes-interval"),
        "enable-node-watcher": _fixed(flags.BOOLEAN, "false"),
    },
}
"""Each role's Go flags (without dashes) and what they become."""

GATES: Mapping[str, Mapping[str, str | None]] = {
    # gate → the value kopf-csi behaves as ("true"/"false"), or None: becomes a flag (below)
    "provisioner": {
        "Topology": "true",  # GA; kopf-csi always uses topology when the driver has it
        "HonorPVReclaimPolicy": "true",  # the finalizer is unconditional (EP #1476)
        "CrossNamespaceVolumeDataSource": "false",
        "VolumeAttributesClass": "true",
    },
    "attacher": {},
    "resizer": {
        "RecoverVolumeExpansionFailure": "true",
        "VolumeAttributesClass": "true",
        "AnnotateFsResize": "true",
    },
    "snapshotter": {"CSIVolumeGroupSnapshot": None},
    "health": {},
}
_GATE_FLAGS = {"CSIVolumeGroupSnapshot": "--enable-volume-group-snapshots"}

ROLE_FLAGS = {"resizer": "--enable-resizer", "snapshotter": "--enable-snapshotter",
              "health": "--enable-health-monitor"}  # fmt: skip
"""A role whose sidecar is not in the pod is switched off: these roles have a flag for it..."""

ROLE_MODULES: Mapping[str, tuple[str, ...]] = {
    "provisioner": ("kopf_csi_handlers.provisioner", "kopf_csi_handlers.capacity"),
    "attacher": ("kopf_csi_handlers.attacher",),
    "resizer": ("kopf_csi_handlers.resizer",),
    "snapshotter": ("kopf_csi_handlers.snapshotter", "kopf_csi_handlers.groupsnapshotter"),
    "health": ("kopf_csi_handlers.health",),
}
"""...the provisioner and the attacher have none: without one of them, the handler modules
are listed (`--no-default-modules --module=...`) without every absent role's."""

DEFAULT_ADDRESS = "/run/csi/socket"  # csi-lib-utils' default --csi-address


@dataclasses.dataclass(frozen=True)
class Sidecar:
    """A Go sidecar container, its `$(VAR)` references resolved where they can be."""

    container: str
    role: str
    args: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Refusal:
    """What stops the migration of one container: its flag (or image), and why."""

    workload: str
    container: str
    what: str
    reason: str

    def __str__(self) -> str:
        return f'{self.workload}: container "{self.container}": {self.what}: {self.reason}'


@dataclasses.dataclass
class Plan:
    """kopf-csi's arguments for one group of sidecars (one driver socket)."""

    args: list[str]
    address: str
    served: tuple[str, str] | None  # (container, endpoint) whose endpoint kopf-csi serves
    notes: list[str]
    refusals: list[Refusal]


class RefusedError(Exception):
    def __init__(self, refusals: Sequence[Refusal]) -> None:
        super().__init__("\n".join(str(refusal) for refusal in refusals))
        self.refusals = list(refusals)


@dataclasses.dataclass(frozen=True)
class _Given:
    container: str
    flag: str  # as written, without the value: -timeout, --timeout
    raw: str  # the value as written ("" for a bare boolean flag)


def parse_args(
    sidecar: Sidecar, workload: str
) -> tuple[list[tuple[str, Entry, _Given]], list[Refusal]]:
    """The sidecar's flags as (Go name, table entry, as given), and what is refused."""
    table = TABLES[sidecar.role]
    found: list[tuple[str, Entry, _Given]] = []
    refusals: list[Refusal] = []
    args = list(sidecar.args)
    index = 0
    while index < len(args):
        arg = args[index]
        index += 1
        if not arg.startswith("-") or arg in ("-", "--"):
            refusals.append(Refusal(workload, sidecar.container, repr(arg), "not a flag"))
            continue
        written, has_value, value = arg.partition("=")
        name = written.lstrip("-")
        entry = table.get(name)
        if entry is None:
            refusals.append(
                Refusal(workload, sidecar.container, written,
                        f"kopf-csi does not support this {sidecar.role} flag")
            )  # fmt: skip
            continue
        if not has_value and not entry.boolean:
            if index >= len(args):
                refusals.append(Refusal(workload, sidecar.container, written, "has no value"))
                continue
            value = args[index]
            index += 1
        found.append((name, entry, _Given(sidecar.container, written, value if has_value or
                                           not entry.boolean else "true")))  # fmt: skip
    return found, refusals


def _normal(kind: flags.Kind, raw: str) -> Any:
    return kind.parse(raw)


def plan(sidecars: Sequence[Sidecar], *, workload: str, present: Iterable[str]) -> Plan:
    """kopf-csi's flags for these sidecars (one driver); `present`: the roles in the group."""
    table = flags.by_name()
    refusals: list[Refusal] = []
    notes: list[str] = []
    given: dict[str, str] = {}
    origin: dict[str, str] = {}  # kopf-csi flag → the container it came from
    shared: dict[str, list[tuple[_Given, Any]]] = {}
    endpoints: list[tuple[str, str]] = []
    verbosity: list[tuple[str, int]] = []
    addresses: set[str] = set()
    roles_seen: dict[str, str] = {}

    for sidecar in sidecars:
        if sidecar.role in roles_seen:
            refusals.append(Refusal(workload, sidecar.container, "image",
                                    f"a second {sidecar.role} for one driver (beside"
                                    f' "{roles_seen[sidecar.role]}")'))  # fmt: skip
            continue
        roles_seen[sidecar.role] = sidecar.container
        parsed, refused = parse_args(sidecar, workload)
        refusals += refused
        seen_shared = set()
        for name, entry, item in parsed:
            where = f"{item.flag}={item.raw}"

            def refuse(
                reason: str, where: str = where, item: _Given = item, into: list[Refusal] = refusals
            ) -> None:
                into.append(Refusal(workload, item.container, where, reason))

            if entry.how == "address":
                addresses.add(item.raw.removeprefix("unix://"))
            elif entry.how == "http":
                endpoints.append((item.container, item.raw))
            elif entry.how == "verbosity":
                try:
                    verbosity.append((item.container, int(item.raw)))
                except ValueError:
                    refuse("is not a whole number")
            elif entry.how == "fixed":
                assert entry.kind is not None
                try:
                    value = _normal(entry.kind, item.raw)
                    accepted = [_normal(entry.kind, text) for text in entry.accepted]
                except ValueError as exc:
                    refuse(str(exc))
                    continue
                if value not in accepted:
                    refuse(f"kopf-csi has no such setting: it always behaves as"
                           f" {item.flag}={entry.accepted[0]}")  # fmt: skip
            elif entry.how == "gates":
                for gate, value, refusal in _gates(sidecar.role, item.raw):
                    if refusal:
                        refuse(refusal, where=f"{item.flag}={item.raw} ({gate})")
                    elif gate in _GATE_FLAGS:
                        given[_GATE_FLAGS[gate]] = value
                        origin[_GATE_FLAGS[gate]] = item.container
            else:
                assert entry.target is not None
                try:
                    value = _normal(table[entry.target].kind, item.raw)
                except ValueError as exc:
                    refuse(str(exc))
                    continue
                if entry.how == "own":
                    given[entry.target] = item.raw
                    origin[entry.target] = item.container
                else:
                    shared.setdefault(name, []).append((item, value))
                    seen_shared.add(name)
        for name, entry in TABLES[sidecar.role].items():  # left out: its Go default
            if entry.how == "shared" and name not in seen_shared:
                assert entry.target is not None
                assert entry.go_default is not None
                default = _normal(table[entry.target].kind, entry.go_default)
                shared.setdefault(name, []).append(
                    (_Given(sidecar.container, "", entry.go_default), default)
                )

    refusals += _merge_shared(shared, given, origin, workload)
    served = _endpoint(endpoints, given, notes)
    if verbosity:
        level = max(value for _, value in verbosity)
        if len({value for _, value in verbosity}) > 1:
            notes.append(f"--v: the sidecars differ; kopf-csi logs as the most verbose: {level}")
    if len(addresses) > 1:
        refusals.append(Refusal(workload, sidecars[0].container, "--csi-address",
                                f"the sidecars of one socket name it differently: {sorted(addresses)}"))  # fmt: skip  # noqa: E501
    address = next(iter(addresses), DEFAULT_ADDRESS)
    if address != DEFAULT_ADDRESS:
        given["--csi-address"] = address
    _keep_fallbacks(given, present)
    _switch_off_absent(given, present)
    try:
        if not refusals:  # a value left out by a refusal would make a second, false one
            flags.resolve(given, {})
    except ValueError as exc:  # SettingsError: a value kopf-csi refuses (it names the flag)
        flag = str(exc).partition("=")[0]
        refusals.append(Refusal(workload, origin.get(flag, sidecars[0].container), flag, str(exc)))
    if not any(entry[0] == "kube-api-qps" for entry in _explicit(shared)):
        notes.append(
            "--kube-api-qps/--kube-api-burst: the sidecars ran with Go's defaults (5/10 each);"
            " kopf-csi's are 100/200 per role (docs/configuration.md)"
        )
    args = _render(given)
    if verbosity:
        args.append(f"--v={max(value for _, value in verbosity)}")
    args += _modules(present)
    return Plan(args=args, address=address, served=served, notes=notes, refusals=refusals)


def _explicit(shared: Mapping[str, list[tuple[_Given, Any]]]) -> list[tuple[str, _Given]]:
    return [(name, item) for name, items in shared.items() for item, _ in items if item.flag]


def _gates(role: str, text: str) -> Iterable[tuple[str, str, str | None]]:
    """(gate, value, refusal or None) for each gate in `A=true,B=false`."""
    known = GATES[role]
    for part in filter(None, (piece.strip() for piece in text.split(","))):
        gate, _, raw = part.partition("=")
        try:
            value = "true" if flags.BOOLEAN.parse(raw) else "false"
        except ValueError:
            yield gate, raw, f"{raw!r} is not a boolean"
            continue
        if gate not in known:
            yield gate, value, f"kopf-csi does not know the {role} feature gate {gate}"
        elif known[gate] is not None and known[gate] != value:
            yield gate, value, f"kopf-csi always behaves as {gate}={known[gate]}"
        else:
            yield gate, value, None


def _merge_shared(
    shared: Mapping[str, list[tuple[_Given, Any]]],
    given: dict[str, str],
    origin: dict[str, str],
    workload: str,
) -> list[Refusal]:
    """One value per shared flag, or a refusal naming the sidecar that differs."""
    refusals = []
    for name, items in shared.items():
        first_item, first = items[0]
        explicit = [item for item, _ in items if item.flag]
        for item, value in items[1:]:
            if value == first:
                continue
            target = f"--{name}"
            if name == "leader-election":
                on = [i.container for i, v in items if v]
                off = [i.container for i, v in items if not v]
                reason = (f"leader election is on in {', '.join(on)} and off in"
                          f" {', '.join(off)}: kopf-csi runs every role with it or without it;"
                          " switch it on (or off) in all of them first")  # fmt: skip
            else:
                reason = (f"{_shown(item, name)} here but {_shown(first_item, name)} in"
                          f' "{first_item.container}": kopf-csi has one {target} for every'
                          " role; give every sidecar the same value first")  # fmt: skip
            refusals.append(Refusal(workload, item.container, item.flag or target, reason))
            break
        else:
            if explicit:
                entry = TABLES["provisioner"][name]
                assert entry.target is not None
                given[entry.target] = explicit[0].raw
                origin[entry.target] = explicit[0].container
    return refusals


def _shown(item: _Given, name: str) -> str:
    if item.flag:
        return f"{item.flag}={item.raw}"
    default = item.raw or '""'
    return f"--{name} left out (Go: {default})"


def _endpoint(
    endpoints: list[tuple[str, str]], given: dict[str, str], notes: list[str]
) -> tuple[str, str] | None:
    """kopf-csi serves one endpoint: the first sidecar's (in role order)."""
    if not endpoints:
        return None
    container, endpoint = endpoints[0]
    given["--http-endpoint"] = endpoint
    others = [f"{name} ({value})" for name, value in endpoints[1:] if value != endpoint]
    if others:
        notes.append(
            f"kopf-csi serves every role's metrics and health on {endpoint} ({container}'s);"
            f" not served any more: {', '.join(others)}: scrape {endpoint} instead"
        )
    return container, endpoint


def _keep_fallbacks(given: dict[str, str], present: Iterable[str]) -> None:
    """A role that did not set a per-role value keeps its Go default, even where kopf-csi
    would fall back to the shared flag another role set (`--timeout` → `--attacher-timeout`)."""
    roles = set(present)
    for role in roles:
        for entry in TABLES[role].values():
            if entry.how != "own" or entry.target is None or entry.target in given:
                continue
            flag = flags.by_name()[entry.target]
            if flag.shared is not None and flag.shared in given:
                given[entry.target] = _raw(flag.kind, flag.default)


def _raw(kind: flags.Kind, value: Any) -> str:
    """A value as a flag's text on a command line (an empty string as nothing)."""
    if kind in (flags.STRING, flags.OPTIONAL_STRING, flags.PATH):
        return "" if value is None else str(value)
    return kind.show(value)


def _switch_off_absent(given: dict[str, str], present: Iterable[str]) -> None:
    roles = set(present)
    if not _needs_modules(roles):
        for role, flag in ROLE_FLAGS.items():
            if role not in roles:
                given[flag] = "false"


def _needs_modules(roles: set[str]) -> bool:
    return any(role not in roles and role not in ROLE_FLAGS for role in ROLE_MODULES)


def _modules(present: Iterable[str]) -> list[str]:
    """The handler modules without those of absent roles, when a flag cannot say it."""
    roles = set(present)
    if not _needs_modules(roles):
        return []
    dropped = {module for role, modules in ROLE_MODULES.items() if role not in roles
               for module in modules}  # fmt: skip
    kept = [module for module in DEFAULT_MODULES if module not in dropped]
    return ["--no-default-modules", *(f"--module={module}" for module in kept)]


def _render(given: Mapping[str, str]) -> list[str]:
    """`--flag=value` in the table's order; a boolean that is true as a bare `--flag`."""
    args = []
    for flag in flags.table():
        if flag.name not in given:
            continue
        raw = given[flag.name]
        if flag.kind is flags.BOOLEAN:
            args.append(flag.name if flags.BOOLEAN.parse(raw) else f"{flag.name}=false")
        else:
            args.append(f"{flag.name}={raw}")
    return args
