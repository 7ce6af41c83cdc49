"""The flag table and the settings it parses, from flags and from the environment.

We test these aspects:
- every field of every settings group has one flag, one `KOPF_CSI_` variable, unique names,
  and the Go sidecars' flag names where the issue lists them;
- a new group is picked up with no code: its Go flags from its docstrings, prefixed where
  taken, shared fields falling back to the shared flag, parsers from the field types;
- values of every kind parse: booleans, integers, numbers, durations, texts, paths, lists;
- which source wins: flag over variable, `KOPF_CSI_` over an alias, own over shared;
- every bad value is a SettingsError naming the flag or variable and the value, and so is
  every value a group refuses (with what was given), and an unknown `KOPF_CSI_` variable;
- `flags.from_env()` is the same parser without flags;
- `describe()` shows each value as a flag, with its source.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any

import pytest

from kopf_csi import flags
from kopf_csi.settings import CSISettings, Settings, SettingsError, WorkerSettings


def resolve(given: dict[str, str] | None = None, **env: str) -> Settings:
    settings: Settings = flags.resolve(given or {}, env).settings
    return settings


def test_every_setting_has_one_flag_and_variable() -> None:
    table = flags.table()
    expected = {
        f"{group.name}.{field.name}"
        for group in dataclasses.fields(Settings)
        for field in dataclasses.fields(getattr(Settings(), group.name))
    }
    assert {flag.dest for flag in table} == expected
    names = [flag.name for flag in table]
    envs = [env for flag in table for env in flag.envs]
    assert len(names) == len(set(names))
    assert len(envs) == len(set(envs))
    for flag in table:
        assert flag.envs[0] == "KOPF_CSI_" + flag.name[2:].upper().replace("-", "_")
        assert flag.help, f"{flag.dest} has no docstring"
        default = getattr(getattr(Settings(), flag.group), flag.field)
        assert flag.default == default


@pytest.mark.parametrize(
    ("name", "dest"),
    [
        ("--csi-address", "csi.address"), ("--timeout", "csi.timeout"),
        ("--worker-threads", "workers.provisioner"),
        ("--retry-interval-start", "provisioner.retry_interval_start"),
        ("--retry-interval-max", "provisioner.retry_interval_max"),
        ("--kube-api-qps", "kube.qps"), ("--kube-api-burst", "kube.burst"),
        ("--kubeconfig", "kube.kubeconfig"),
        ("--volume-name-prefix", "provisioner.volume_name_prefix"),
        ("--volume-name-uuid-length", "provisioner.volume_name_uuid_length"),
        ("--default-fstype", "provisioner.default_fstype"),
        ("--extra-create-metadata", "provisioner.extra_create_metadata"),
        ("--strict-topology", "provisioner.strict_topology"),
        ("--immediate-topology", "provisioner.immediate_topology"),
        ("--leader-election", "leader_election.enabled"),
        ("--leader-election-namespace", "leader_election.namespace"),
        ("--leader-election-lease-duration", "leader_election.lease_duration"),
        ("--leader-election-renew-deadline", "leader_election.renew_deadline"),
        ("--leader-election-retry-period", "leader_election.retry_period"),
        ("--http-endpoint", "http.endpoint"), ("--metrics-path", "http.metrics_path"),
        ("--enable-capacity", "capacity.enabled"),
        ("--capacity-poll-interval", "capacity.poll_interval"),
        ("--node-deployment", "provisioner.node_deployment"),
        ("--reconcile-sync", "attacher.reconcile_sync"),
        ("--attacher-timeout", "attacher.timeout"),
        ("--attacher-worker-threads", "workers.attacher"),
    ],
)  # fmt: skip
def test_go_flag_names(name: str, dest: str) -> None:
    assert flags.by_name()[name].dest == dest


# A settings root of the same shape as Settings, with a group that kopf_csi.flags has never
# heard of: what another sidecar's options look like when they are added.


@dataclasses.dataclass(frozen=True)
class GadgetOptions:
    timeout: float = 60.0
    """`--timeout`: how long each gadget call may take (the Go gadgeteer's default)."""

    gadget_name_prefix: str = "gadget"
    """`--gadget-name-prefix`: the gadget names' prefix."""

    workers: int = 10
    """`--worker-threads`: gadgets made at once."""

    labels: tuple[str, ...] = ()
    """Labels put on every gadget."""

    enabled: bool = True

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ValueError("gadget workers must be at least 1")


@dataclasses.dataclass(frozen=True)
class GadgetRoot:
    csi: CSISettings = dataclasses.field(default_factory=CSISettings)
    workers: WorkerSettings = dataclasses.field(default_factory=WorkerSettings)
    gadget: GadgetOptions = dataclasses.field(default_factory=GadgetOptions)


@dataclasses.dataclass(frozen=True)
class OddOptions:
    shape: dict[str, int] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class OddRoot:
    odd: OddOptions = dataclasses.field(default_factory=OddOptions)


def test_a_new_group_gets_its_flags_with_no_code() -> None:
    table = {flag.dest: flag for flag in flags.table(GadgetRoot)}
    gadget = {field: table[f"gadget.{field}"] for field in
              ("timeout", "gadget_name_prefix", "workers", "labels", "enabled")}  # fmt: skip
    assert gadget["timeout"].name == "--gadget-timeout"  # --timeout is csi.timeout's
    assert gadget["timeout"].shared == "--timeout"
    assert gadget["gadget_name_prefix"].name == "--gadget-name-prefix"  # the Go name, free
    assert gadget["workers"].name == "--gadget-worker-threads"  # taken by workers.provisioner
    assert gadget["labels"].name == "--gadget-labels"  # no Go flag in the docstring
    assert gadget["labels"].kind is flags.ITEMS
    assert gadget["enabled"].name == "--gadget-enabled"
    assert gadget["enabled"].help == ""

    root = flags.resolve(
        {"--timeout": "2m", "--gadget-labels": "a, b,,c"},
        {"KOPF_CSI_GADGET_WORKER_THREADS": "3", "KOPF_CSI_GADGET_ENABLED": "off"},
        root=GadgetRoot,
    ).settings
    assert root == GadgetRoot(
        csi=CSISettings(timeout=120.0),
        gadget=GadgetOptions(timeout=120.0, workers=3, labels=("a", "b", "c"), enabled=False),
    )
    with pytest.raises(SettingsError, match=r"gadget workers must be at least 1 \(given: "
                       r"KOPF_CSI_GADGET_WORKER_THREADS='0'\)"):  # fmt: skip
        flags.resolve({}, {"KOPF_CSI_GADGET_WORKER_THREADS": "0"}, root=GadgetRoot)


def test_the_exception_tables_name_existing_settings() -> None:
    dests = {flag.dest for flag in flags.table()}
    keys = {*flags.NAMES, *flags.ALIASES, *flags.NUMBERS, *flags.GO_DEFAULTS}
    assert {f"{group}.{field}" for group, field in keys} <= dests
    assert set(flags.SHARED.values()) <= {flag.name for flag in flags.table()}


def test_a_field_of_an_unknown_type_is_refused_loudly() -> None:
    with pytest.raises(TypeError, match=r"Settings\.odd\.shape: no flag parser"):
        flags.table(OddRoot)


@pytest.mark.parametrize(
    ("given", "env", "path", "value"),
    [
        pytest.param({"--strict-topology": "true"}, {}, "provisioner.strict_topology", True,
                     id="boolean flag alone"),
        pytest.param({"--immediate-topology": "false"}, {}, "provisioner.immediate_topology",
                     False, id="boolean flag off"),
        pytest.param({}, {"KOPF_CSI_LEADER_ELECTION": "yes"}, "leader_election.enabled", True,
                     id="boolean yes"),
        pytest.param({}, {"KOPF_CSI_ENABLE_CAPACITY": "1"}, "capacity.enabled", True,
                     id="boolean 1"),
        pytest.param({}, {"KOPF_CSI_ENABLE_HEALTH_MONITOR": "Off"}, "health.enabled", False,
                     id="boolean Off"),
        pytest.param({"--worker-threads": "250"}, {}, "workers.provisioner", 250, id="integer"),
        pytest.param({"--volume-name-uuid-length": "-1"}, {}, "provisioner.volume_name_uuid_length",
                     -1, id="negative integer"),
        pytest.param({"--kube-api-qps": "12.5"}, {}, "kube.qps", 12.5, id="number"),
        pytest.param({"--capacity-poll-interval": "1m30s"}, {}, "capacity.poll_interval", 90.0,
                     id="duration"),
        pytest.param({}, {"KOPF_CSI_RECONCILE_SYNC": "45"}, "attacher.reconcile_sync", 45.0,
                     id="duration in seconds"),
        pytest.param({"--volume-name-prefix": "vol"}, {}, "provisioner.volume_name_prefix", "vol",
                     id="text"),
        pytest.param({"--default-fstype": ""}, {}, "provisioner.default_fstype", "",
                     id="empty text by flag"),
        pytest.param({"--leader-election-namespace": "csi"}, {}, "leader_election.namespace",
                     "csi", id="optional text"),
        pytest.param({"--leader-election-namespace": ""}, {}, "leader_election.namespace", None,
                     id="optional text empty"),
        pytest.param({"--kubeconfig": "/etc/kube/config"}, {}, "kube.kubeconfig",
                     pathlib.Path("/etc/kube/config"), id="path"),
        pytest.param({}, {"KUBECONFIG": "/k"}, "kube.kubeconfig", pathlib.Path("/k"),
                     id="path from the usual variable"),
        pytest.param({"--http-endpoint": "[::]:8080"}, {}, "http.endpoint", "[::]:8080",
                     id="ipv6 endpoint"),
        pytest.param({}, {"POD_NAMESPACE": "storage"}, "kube.namespace", "storage",
                     id="pod namespace"),
        pytest.param({}, {"KOPF_CSI_NODE_DEPLOYMENT": "true", "NODE_NAME": "n1"},
                     "provisioner.node_name", "n1", id="node deployment with its node"),
    ],
)  # fmt: skip
def test_values_of_every_kind(
    given: dict[str, str], env: dict[str, str], path: str, value: Any
) -> None:
    group, field = path.split(".")
    assert getattr(getattr(resolve(given, **env), group), field) == value


def test_the_flag_wins_over_the_environment() -> None:
    settings = resolve({"--timeout": "20s"}, KOPF_CSI_TIMEOUT="30s", CSI_TIMEOUT="40s")
    assert settings.csi.timeout == 20.0


def test_our_variable_wins_over_the_usual_one_and_empty_is_unset() -> None:
    assert resolve(KOPF_CSI_TIMEOUT="30s", CSI_TIMEOUT="40s").csi.timeout == 30.0
    assert resolve(KOPF_CSI_TIMEOUT="", CSI_TIMEOUT="40s").csi.timeout == 40.0
    assert resolve(KOPF_CSI_TIMEOUT="").csi.timeout == CSISettings.timeout


def test_shared_flags_fall_back_for_each_sidecar() -> None:
    # Nothing given: each sidecar's own Go default.
    settings = resolve()
    assert (settings.csi.timeout, settings.attacher.timeout) == (10.0, 15.0)
    # The shared flag: every sidecar that has no value of its own.
    settings = resolve({"--timeout": "1m"}, KOPF_CSI_HEALTH_TIMEOUT="5s")
    assert (settings.csi.timeout, settings.attacher.timeout, settings.health.timeout) == (
        60.0, 60.0, 5.0,
    )  # fmt: skip
    # A sidecar's own flag wins over the shared flag and the shared variable.
    settings = resolve({"--attacher-retry-interval-max": "10m"}, KOPF_CSI_RETRY_INTERVAL_MAX="2m")
    assert settings.attacher.retry_interval_max == 600.0
    assert settings.provisioner.retry_interval_max == 120.0
    # The shared variable, including the old alias, reaches every sidecar too.
    settings = resolve(CSI_TIMEOUT="7s", KOPF_CSI_DEFAULT_FSTYPE="xfs")
    assert settings.attacher.timeout == 7.0
    assert settings.attacher.default_fstype == settings.provisioner.default_fstype == "xfs"


def test_worker_counts_are_not_shared() -> None:
    settings = resolve({"--worker-threads": "50"})
    assert (settings.workers.provisioner, settings.workers.attacher) == (50, 10)


@pytest.mark.parametrize(
    ("given", "env", "message"),
    [
        # One value that does not parse: named, with the value, as given.
        ({"--timeout": "soon"}, {}, "--timeout='soon' is not a duration (like 10s, 1m30s, 300ms)"),
        ({}, {"CSI_TIMEOUT": "0"}, "CSI_TIMEOUT='0' must be more than zero"),
        ({"--reconcile-sync": "-1m"}, {}, "--reconcile-sync='-1m' must be more than zero"),
        ({}, {"KOPF_CSI_STRICT_TOPOLOGY": "maybe"},
         "KOPF_CSI_STRICT_TOPOLOGY='maybe' is not a boolean (true or false)"),
        ({"--worker-threads": "ten"}, {}, "--worker-threads='ten' is not a whole number"),
        ({"--worker-threads": "2.5"}, {}, "--worker-threads='2.5' is not a whole number"),
        ({"--kube-api-qps": "fast"}, {}, "--kube-api-qps='fast' is not a number"),
        ({"--kube-api-qps": "0"}, {}, "--kube-api-qps='0' must be more than zero"),
        ({"--kube-api-qps": "nan"}, {}, "--kube-api-qps='nan' is not a number"),
        # Values each group refuses: the rule, and what was given.
        ({"--csi-address": "tcp://driver:10000"}, {},
         "the CSI address must be a unix socket, not 'tcp://driver:10000'"
         " (given: --csi-address='tcp://driver:10000')"),
        ({"--csi-address": ""}, {}, "the CSI address cannot be empty"),
        ({"--kube-api-burst": "0"}, {}, "the kube API burst must be at least 1, got 0"),
        ({"--pod-namespace": ""}, {}, "the operator's namespace cannot be empty"),
        ({"--volume-name-prefix": ""}, {}, "volume name prefix cannot be of length 0"),
        ({"--volume-name-uuid-length": "33"}, {},
         "volume name UUID length must be -1 or 0..32, got 33"),
        ({"--retry-interval-start": "10m"}, {}, "retry intervals must satisfy 0 < start <= max"
         " (given: --retry-interval-start='10m')"),
        ({"--node-deployment": "true"}, {}, "node deployment needs the node name (NODE_NAME)"),
        ({"--attacher-worker-threads": "0"}, {}, "worker counts must be at least 1"
         " (given: --attacher-worker-threads='0')"),
        ({"--max-entries": "-5"}, {}, "max entries must not be negative"),
        ({"--health-worker-threads": "0"}, {}, "the health monitor needs at least one worker"),
        ({"--leader-election-renew-deadline": "15s"}, {},
         "lease duration must be more than the renew deadline"),
        ({"--leader-election-retry-period": "9s"}, {},
         "renew deadline must be more than 1.2 x the retry period"),
        ({"--http-endpoint": "8080"}, {}, "the HTTP endpoint must be [host]:port (like :8080)"),
        ({"--http-endpoint": ":99999"}, {}, "the HTTP endpoint's port is out of range"),
        ({"--metrics-path": "metrics"}, {}, "the metrics path must start with /"),
        # A typo in a variable's name is not ignored.
        ({}, {"KOPF_CSI_STRICT_TOPOLGY": "true"}, "unknown environment variable"
         " KOPF_CSI_STRICT_TOPOLGY (did you mean KOPF_CSI_STRICT_TOPOLOGY?)"),
    ],
)  # fmt: skip
def test_bad_values_are_clear_errors(
    given: dict[str, str], env: dict[str, str], message: str
) -> None:
    with pytest.raises(SettingsError) as err:
        resolve(given, **env)
    assert message in str(err.value)


def test_group_errors_list_every_value_given_to_the_group() -> None:
    with pytest.raises(SettingsError) as err:
        resolve({"--retry-interval-max": "1s"}, KOPF_CSI_RETRY_INTERVAL_START="5s")
    assert str(err.value) == (
        "retry intervals must satisfy 0 < start <= max (given: "
        "KOPF_CSI_RETRY_INTERVAL_START='5s', --retry-interval-max='1s')"
    )


def test_variables_of_run_options_and_tools_are_not_typos() -> None:
    settings = resolve(
        KOPF_CSI_LOG_LEVEL="DEBUG", KOPF_CSI_MODULES="x", KOPF_CSI_BENCH_PROFILE="/tmp/p"
    )
    assert settings == Settings()


def test_from_env_is_the_same_parser() -> None:
    env = {"KOPF_CSI_KUBE_API_QPS": "20", "CSI_ADDRESS": "/csi/csi.sock", "NODE_NAME": "n"}
    assert flags.from_env(env) == resolve(**env)
    assert flags.from_env(env).kube.qps == 20.0
    with pytest.raises(SettingsError, match=r"^KOPF_CSI_RECONCILE_SYNC='often' is not a dur"):
        flags.from_env({"KOPF_CSI_RECONCILE_SYNC": "often"})


def test_describe_shows_values_as_flags_with_sources() -> None:
    resolved = flags.resolve({"--timeout": "90s"}, {"POD_NAMESPACE": "csi"})
    lines = flags.describe(resolved)
    assert len(lines) == len(flags.table())
    assert "--timeout=1m30s  # from --timeout" in lines
    assert "--attacher-timeout=1m30s  # from --timeout" in lines
    assert "--pod-namespace=csi  # from POD_NAMESPACE" in lines
    assert "--kube-api-qps=100  # default" in lines
    assert '--default-fstype=""  # default' in lines


def test_descriptions_say_where_go_names_differ_and_what_falls_back() -> None:
    named = flags.by_name()
    attacher = flags.description(named["--attacher-timeout"])
    assert attacher.endswith(" Go flag: `--timeout`. Falls back to `--timeout`.")
    assert not attacher.startswith("`")
    timeout = flags.description(named["--timeout"], fallbacks=True)
    assert "Go flag" not in timeout
    assert "Also the default of `--attacher-timeout`, `--health-timeout`" in timeout
    workers = flags.description(named["--attacher-worker-threads"])
    assert workers.endswith("Go flag: `--worker-threads` (external-attacher's).")
