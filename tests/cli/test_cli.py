"""The `kopf-csi` command in-process: its commands, its options and its errors.

We test these aspects:
- `config` prints the effective settings from flags (Go's single-dash spelling too) and the
  environment, each with its source, and takes all of `run`'s arguments;
- errors (bad values, unknown flags or commands, bad run options) exit with code 2 and one
  line on stderr naming the problem, and `run` fails so before it starts anything (unknown
  modules: tests/cli/test_run.py, as `run` configures logging first);
- module selection: the defaults, then the user's (flags, else `KOPF_CSI_MODULES`), or only
  the user's; the log level from `--log-level`, klog's `--v`, or the environment;
- `docs --output` writes the configuration reference;
- `modules.load` puts a user's file or package module into the given registry, and tells a
  missing module apart from a module that fails on its own import.
"""

from __future__ import annotations

import argparse
import pathlib
import subprocess
import sys
from collections.abc import Iterator

import kopf
import pytest

from kopf_csi import cli, modules, runtime


def run_main(capsys: pytest.CaptureFixture[str], *argv: str, **env: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_:
        cli.main(list(argv), env)
    out, err = capsys.readouterr()
    return int(exit_.value.code or 0), out, err


def test_config_prints_the_effective_settings(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_main(
        capsys, "config", "-timeout=5s", "--worker-threads", "20", "-strict-topology",
        KOPF_CSI_KUBE_API_QPS="50", CSI_ADDRESS="/csi/csi.sock",
    )  # fmt: skip
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert "--timeout=5s  # from --timeout" in lines
    assert "--worker-threads=20  # from --worker-threads" in lines
    assert "--strict-topology=true  # from --strict-topology" in lines
    assert "--kube-api-qps=50  # from KOPF_CSI_KUBE_API_QPS" in lines
    assert "--csi-address=/csi/csi.sock  # from CSI_ADDRESS" in lines
    assert "--attacher-timeout=5s  # from --timeout" in lines


def test_config_takes_the_arguments_of_run(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_main(capsys, "config", "--v=5", "-m", "mine.handlers", "--log-format=json")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[-2] == f"# handler modules: {', '.join(modules.DEFAULT_MODULES)}, mine.handlers"
    assert lines[-1] == "# log level: DEBUG, format: json"


@pytest.mark.parametrize(
    ("argv", "env", "line"),
    [
        (["run", "--kube-api-burst=many"], {},
         "kopf-csi run: error: --kube-api-burst='many' is not a whole number"),
        (["run"], {"KOPF_CSI_TIMEOUT": "forever"},
         "kopf-csi run: error: KOPF_CSI_TIMEOUT='forever' is not a duration"),
        (["run", "--leader-election", "--leader-election-lease-duration=5s"], {},
         "kopf-csi run: error: the leader election lease duration must be more than the renew"
         " deadline (given: --leader-election='true', --leader-election-lease-duration='5s')"),
        (["config", "--csi-adress=/x"], {},
         "kopf-csi config: error: unrecognized arguments: --csi-adress=/x; did you mean"
         " --csi-address? (see kopf-csi config --help)"),
        (["run", "--log-level=loud"], {}, "kopf-csi run: error: argument --log-level: invalid"),
        (["run"], {"KOPF_CSI_LOG_LEVEL": "loud"},
         "kopf-csi run: error: KOPF_CSI_LOG_LEVEL='LOUD' is not one of DEBUG, INFO"),
        (["run"], {"KOPF_CSI_LOG_FORMAT": "xml"},
         "kopf-csi run: error: KOPF_CSI_LOG_FORMAT='xml' is not one of auto, json, console"),
        (["run", "--no-default-modules"], {},
         "kopf-csi run: error: no handler modules to run: give -m MODULE, or keep the defaults"),
        (["run", "--time=1s"], {},  # Go takes no abbreviations, nor do we
         "kopf-csi run: error: unrecognized arguments: --time=1s; did you mean --timeout?"),
        (["run", "--nope"], {},  # explain's --operator is not run's to suggest
         "kopf-csi run: error: unrecognized arguments: --nope (see kopf-csi run --help)"),
        (["explain", "pvc/x", "--operatr=http://o"], {},
         "kopf-csi explain: error: unrecognized arguments: --operatr=http://o; did you mean"
         " --operator?"),
        (["run", "--kubeconfig=/nonexistent/config"], {},
         "kopf-csi run: error: --kubeconfig='/nonexistent/config' is not a kubeconfig file"),
        (["run"], {"KUBECONFIG": "/nonexistent/a:/nonexistent/b"},
         "kopf-csi run: error: KUBECONFIG='/nonexistent/a:/nonexistent/b' is not a kubeconfig"),
        (["config", "--kubeconfig=/nowhere"], {},  # as `run` would refuse it
         "kopf-csi config: error: --kubeconfig='/nowhere' is not a kubeconfig file: no such"),
        (["start"], {}, "kopf-csi: error: argument command: invalid choice: 'start'"),
        ([], {}, "kopf-csi: error: the following arguments are required: command"),
    ],
)  # fmt: skip
def test_errors_exit_2_with_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], env: dict[str, str], line: str
) -> None:
    code, out, err = run_main(capsys, *argv, **env)
    assert code == 2
    assert out == ""
    assert len(err.splitlines()) == 1, err
    assert err.startswith(line), err


def _args(*argv: str) -> argparse.Namespace:
    return cli._parse(cli._build_parser(), ["run", *argv])


@pytest.mark.parametrize(
    ("argv", "env", "expected"),
    [
        ([], {}, list(modules.DEFAULT_MODULES)),
        (["-m", "mine.quota", "--module", "./extra.py"], {},
         [*modules.DEFAULT_MODULES, "mine.quota", "./extra.py"]),
        ([], {"KOPF_CSI_MODULES": "mine.quota, mine.labels,"},
         [*modules.DEFAULT_MODULES, "mine.quota", "mine.labels"]),
        (["-m", "mine.flag"], {"KOPF_CSI_MODULES": "mine.env"},
         [*modules.DEFAULT_MODULES, "mine.flag"]),
        (["--no-default-modules", "-m", "kopf_csi_handlers.lifecycle", "-m", "mine.x"], {},
         ["kopf_csi_handlers.lifecycle", "mine.x"]),
        (["-m", "kopf_csi_handlers.caches"], {}, list(modules.DEFAULT_MODULES)),
    ],
)  # fmt: skip
def test_module_selection(argv: list[str], env: dict[str, str], expected: list[str]) -> None:
    assert cli._modules(_args(*argv), env) == expected


@pytest.mark.parametrize(
    ("argv", "env", "level"),
    [
        ([], {}, "INFO"),
        (["--v=5"], {}, "DEBUG"),
        (["-v=2"], {}, "INFO"),
        (["--v=5", "--log-level=warning"], {}, "WARNING"),
        ([], {"KOPF_CSI_LOG_LEVEL": "error"}, "ERROR"),
        (["--log-level=DEBUG"], {"KOPF_CSI_LOG_LEVEL": "error"}, "DEBUG"),
    ],
)  # fmt: skip
def test_log_level(argv: list[str], env: dict[str, str], level: str) -> None:
    assert cli._log_level(_args(*argv), env) == level


def test_settings_for_the_arguments_of_run() -> None:
    settings = cli.settings_for(["-timeout=3s", "--leader-election"], {"POD_NAMESPACE": "csi"})
    assert (settings.csi.timeout, settings.leader_election.enabled) == (3.0, True)
    assert settings.kube.namespace == "csi"
    with pytest.raises(cli.UsageError, match="did you mean --csi-address"):
        cli.settings_for(["--csi-adress=/x"], {})


def test_docs_writes_the_reference(
    capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path
) -> None:
    target = tmp_path / "configuration.md"
    code, out, err = run_main(capsys, "docs", "--output", str(target))
    assert (code, out, err) == (0, "", "")
    assert target.read_text() == cli.reference()


USER_MODULE = """
import kopf

@kopf.on.startup(id="user.started")
async def started(**_):
    pass
"""


@pytest.fixture
def importable(tmp_path: pathlib.Path) -> Iterator[pathlib.Path]:
    sys.path.insert(0, str(tmp_path))
    yield tmp_path
    sys.path.remove(str(tmp_path))
    for name in [name for name in sys.modules if name.startswith("kopf_csi_test_pkg")]:
        del sys.modules[name]


def _activity_ids(registry: kopf.OperatorRegistry) -> list[str]:
    return [handler.id for handler in registry._activities.get_all_handlers()]


def test_a_user_file_is_loaded_into_the_registry(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "user_handlers.py"
    path.write_text(USER_MODULE)
    default = kopf.get_default_registry()
    registry = kopf.OperatorRegistry()
    modules.load([str(path)], registry=registry)
    assert _activity_ids(registry) == ["user.started", runtime.STARTED_HANDLER_ID]
    assert kopf.get_default_registry() is default
    assert "user.started" not in _activity_ids(default)


def test_a_user_package_module_is_loaded_again_for_each_registry(
    importable: pathlib.Path,
) -> None:
    package = importable / "kopf_csi_test_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "handlers.py").write_text(USER_MODULE)
    first, second = kopf.OperatorRegistry(), kopf.OperatorRegistry()
    modules.load(["kopf_csi_test_pkg.handlers"], registry=first)
    modules.load(["kopf_csi_test_pkg.handlers"], registry=second)
    assert (
        _activity_ids(first)
        == _activity_ids(second)
        == [
            "user.started",
            runtime.STARTED_HANDLER_ID,
        ]
    )


def test_a_module_failing_its_own_import_is_not_a_missing_module(
    importable: pathlib.Path,
) -> None:
    package = importable / "kopf_csi_test_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "broken.py").write_text("import kopf_csi_dependency_that_is_not_there\n")
    with pytest.raises(ModuleNotFoundError):
        modules.load(["kopf_csi_test_pkg.broken"], registry=kopf.OperatorRegistry())
    with pytest.raises(modules.ModuleLoadError, match=r"no module named 'kopf_csi_test_pkg\.nope'"):
        modules.load(["kopf_csi_test_pkg.nope"], registry=kopf.OperatorRegistry())


def test_paths_and_dotted_names() -> None:
    assert modules.is_path("handlers/mine.py")
    assert modules.is_path("mine.py")
    assert modules.is_path("./mine")
    assert not modules.is_path("handlers.mine")


def test_the_default_modules_are_the_test_runners() -> None:
    from kopf_csi.testing import operator

    assert operator.DEFAULT_MODULES is modules.DEFAULT_MODULES
    assert "kopf_csi_handlers.lifecycle" in modules.DEFAULT_MODULES
    assert not any(modules.is_path(name) for name in modules.DEFAULT_MODULES)


@pytest.mark.parametrize(
    "argv",
    [("docs", "--output", "{tmp}/configuration.md"),
     ("explain", "pvc/default/x", "--kubeconfig", "{tmp}/missing")],
    ids=["docs", "explain"],
)  # fmt: skip
def test_commands_that_run_no_operator_import_no_kopf(
    tmp_path: pathlib.Path, argv: tuple[str, ...]
) -> None:
    """kopf is the operator's (0.2-0.4 s of imports): `kopf-csi explain`, run again and again
    by someone finding out why a claim is stuck, and `docs` never import it. A fresh
    interpreter's `-X importtime` lists every module the real command imported."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "kopf_csi",
         *(arg.format(tmp=tmp_path) for arg in argv)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()
                if line.startswith("import time:")}  # fmt: skip
    assert "kopf_csi.cli" in imported, done.stderr[-2000:]
    assert not {name for name in imported if name == "kopf" or name.startswith("kopf.")}
