"""kopf-csi's pytest plugin: test your handler modules the way kopf-csi tests its own.

Installing kopf-csi registers this plugin (the `pytest11` entry point `kopf_csi`), so these
fixtures are there in any test suite, with nothing to import. Everything is real: an emulated
Kubernetes API over local HTTP, the reference CSI driver on a unix socket, kopf in a thread.

- `cluster`: the emulated Kubernetes API (`EmulatedCluster`); `kubeconfig`: the test's own
  file for it (cluster-admin), `operator_kubeconfig`: the operator's (below);
- `kcm`: the kube-controller-manager stand-in (binds claims, releases volumes, attaches);
- `snapshot_controller`: the snapshot-controller stand-in (makes the contents of
  VolumeSnapshots and VolumeGroupSnapshots, and binds them), for tests with snapshots;
- `driver`: the reference CSI driver (`driver_config` to change its features or faults), with
  a fixed capacity of `KIT_CAPACITY` (1 TiB) per node whatever the host's disk;
- `operator`: kopf running `handler_modules` against both, with `settings`.

The stand-ins are what a cluster runs beside the operator: without `kcm` no claim is ever
Bound, and without `snapshot_controller` a VolumeSnapshot never gets its content. Each is a
fixture a test asks for by name, as it would install the controller.

A `cluster` starts with one usable node (`cluster_nodes`: a Node and its CSINode for the
reference driver, as kubelet and the node-driver-registrar register them); override
`cluster_nodes` to have others, or none.

The kit runs on pytest-asyncio (`pip install 'kopf-csi[testing]'`), with nothing to configure:
its async fixtures are pytest-asyncio fixtures, and an `async def` test that uses any of them
is marked `asyncio` here, in pytest-asyncio's strict mode (its default) as in auto mode. Your
own async fixtures need `@pytest_asyncio.fixture`, or `asyncio_mode = "auto"`.

Override `handler_modules` to add yours to the defaults, and `settings` to change options:

    @pytest.fixture
    def handler_modules():
        return DEFAULT_MODULES + ("myproject.handlers.quota",)

The emulated API authorizes the operator as a cluster does (`kit_rbac`, on by default): as
the Deployment's ServiceAccount (`kopf-csi` in namespace `kopf-csi`, the operator's namespace
then), with the shipped RBAC plus the roles its non-default modules declare
(`api.rbac.declare`). A request of the operator's neither grants is refused with the API
server's 403, and the test fails, quoting it and the declaration that would grant it. Two
kubeconfigs: `operator_kubeconfig` is the operator's (its ServiceAccount's token; `settings`
use it), `kubeconfig` the test's own, cluster-admin's as kind's is (for kubectl, explain, a
client of the test's). The test's own `cluster.create(...)` calls are never refused. A test
that needs an all-powerful operator says so, and why: `@pytest.mark.kit_rbac(False)`, or the
`kit_rbac` fixture overridden to return False.

`until()` waits for a condition (the end-to-end tests' only way to wait), and `seed_node()`
registers a Node and its CSINode as kubelet and the node-driver-registrar would. Tests marked
`kind` are skipped, saying why, where Docker or kind are missing.

Fixtures of the same name in a suite's own conftest.py take precedence over these.
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import pathlib
import shutil
import time
import types
from collections.abc import AsyncIterator, Callable, Generator
from typing import TYPE_CHECKING, Any

import pytest

from kopf_csi import rbac
from kopf_csi.driver import Driver, DriverConfig, Features, Limits, running_driver
from kopf_csi.settings import CSISettings, KubeSettings, Settings
from kopf_csi.testing.lostexceptions import LostExceptions
from kopf_csi.testing.operator import (
    DEFAULT_MODULES,
    OperatorThread,
    StartupError,
    running_operator,
)

pytest_asyncio: types.ModuleType | None
try:
    import pytest_asyncio
except ImportError:  # the kit's fixtures say what to install when a test asks for them
    pytest_asyncio = None

if TYPE_CHECKING:  # the emulator needs kmock (the `testing` extra): imported when used
    from kopf_csi.testing.emulator import EmulatedCluster
    from kopf_csi.testing.kcm import ControllerManager
    from kopf_csi.testing.snapshots import SnapshotController

__all__ = [
    "DEFAULT_MODULES",
    "DRIVER_NAME",
    "KIT_CAPACITY",
    "NODE",
    "TOPOLOGY_KEY",
    "OperatorThread",
    "StartupError",
    "seed_node",
    "until",
]

DRIVER_NAME = "hostpath.csi.kopf.dev"
NODE = "node-1"
TOPOLOGY_KEY = "topology.hostpath.csi.kopf.dev/node"
KIT_CAPACITY = 1024**4
"""The kit's driver's capacity, bytes per node (1 TiB): fixed, so that a test's claims fit or
not the same way on every machine. The volumes are directories (and sparse files for block
volumes): nothing of it is taken from the host's disk. Change it with `driver_config`'s
`limits` (`dataclasses.replace(driver_config.limits, total_capacity=...)`)."""


async def until(predicate: Callable[[], Any], *, timeout: float = 10.0) -> Any:
    """Poll until `predicate()` is truthy and return its value; fail after `timeout` seconds,
    naming the predicate by its source (a lambda's line) and its last value."""
    deadline = time.monotonic() + timeout
    while not (result := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(
                f"not true within {timeout:g}s: {_source(predicate)} (last: {result!r})"
            )
        await asyncio.sleep(0.02)
    return result


def _source(predicate: Callable[[], Any]) -> str:
    """The predicate's source, as written (`lambda: ...`), or its repr where there is none."""
    try:
        lines = inspect.getsource(predicate)
    except (OSError, TypeError):
        return repr(predicate)
    return " ".join(line.strip() for line in lines.strip().splitlines())


def seed_node(cluster: EmulatedCluster, name: str = NODE, *, driver: str = DRIVER_NAME) -> None:
    """A Node with our topology label and its CSINode entry for the driver."""
    cluster.create(
        "nodes",
        {"apiVersion": "v1", "kind": "Node",
         "metadata": {"name": name, "labels": {TOPOLOGY_KEY: name}}},
    )  # fmt: skip
    cluster.create(
        "csinodes",
        {"apiVersion": "storage.k8s.io/v1", "kind": "CSINode", "metadata": {"name": name},
         "spec": {"drivers": [{"name": driver, "nodeID": name, "topologyKeys": [TOPOLOGY_KEY]}]}},
    )  # fmt: skip


_LOST = LostExceptions()
_BETWEEN: list[str] = []  # collected between tests: the session's failure


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "kind: needs Docker and the kind binary; skipped if absent")
    config.addinivalue_line(
        "markers", "kit_rbac(on=True): whether the operator runs as its ServiceAccount under the"
        " shipped RBAC and its modules' declared rules (403 for anything else); on by default",
    )  # fmt: skip
    _LOST.install()


def pytest_unconfigure(config: pytest.Config) -> None:
    _LOST.uninstall()


@pytest.fixture(autouse=True)
def _no_lost_task_exceptions() -> Generator[None, None, None]:
    """Fail a test during which a task's exception was never retrieved (`lostexceptions`):
    a background task died, and what waited on it may wait for ever."""
    _BETWEEN.extend(_LOST.take())  # from before this test: the session's (below)
    yield
    if lost := _LOST.take():
        pytest.fail("a task's exception was never retrieved:\n" + "\n".join(lost))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The tasks collected after the last test: the session fails for them."""
    gc.collect()
    if lost := _BETWEEN + _LOST.take():
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line("a task's exception was never retrieved (after a test):", red=True)
            for line in lost:
                reporter.write_line(f"  {line}", red=True)


ASYNC_FIXTURES = ("cluster", "kcm", "snapshot_controller", "driver", "operator")
"""The kit's async fixtures: an async test using any of them runs on pytest-asyncio."""
MISSING = "the kopf-csi testing kit needs {}: pip install 'kopf-csi[testing]'"


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_pycollect_makeitem(
    collector: pytest.Collector, name: str, obj: object
) -> Generator[None, Any, Any]:
    """Mark `asyncio` the async tests that use the kit's fixtures, so that pytest-asyncio runs
    them in strict mode too. Innermost of the wrappers (`trylast`): pytest-asyncio's own wrapper
    turns the marked tests into its items after this."""
    result = yield
    for item in result if isinstance(result, list) else [result]:
        if (
            isinstance(item, pytest.Function)
            and pytest_asyncio is not None
            and inspect.iscoroutinefunction(item.obj)
            and item.get_closest_marker("asyncio") is None
            and any(fixture in ASYNC_FIXTURES for fixture in item.fixturenames)
        ):
            item.add_marker(pytest.mark.asyncio)
    return result


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked `kind` need Docker and kind; skip them, saying so, where either is absent."""
    missing = [tool for tool in ("docker", "kind") if shutil.which(tool) is None]
    if not missing:
        return
    skip = pytest.mark.skip(reason=f"needs {' and '.join(missing)} (not installed here)")
    for item in items:
        if item.get_closest_marker("kind") is not None:  # the marker, not a `kind` keyword
            item.add_marker(skip)


def _async_fixture(function: Callable[..., Any]) -> Any:
    """A pytest-asyncio fixture (in the test's loop), or one that says what to install."""
    if pytest_asyncio is not None:
        return pytest_asyncio.fixture(function, loop_scope="function")

    @pytest.fixture(name=function.__name__)
    def missing() -> None:
        pytest.fail(MISSING.format("pytest-asyncio"), pytrace=False)

    return missing


@pytest.fixture
def cluster_nodes() -> tuple[str, ...]:
    """The nodes a `cluster` starts with (`seed_node`): one, so that claims can be placed."""
    return (NODE,)


@pytest.fixture
def kit_rbac(request: pytest.FixtureRequest) -> bool:
    """Whether the operator runs under the shipped and declared RBAC: yes, unless the test is
    marked `kit_rbac(False)`; override this fixture (return False) for a whole module."""
    marker = request.node.get_closest_marker("kit_rbac")
    if marker is None:
        return True
    return bool(marker.args[0]) if marker.args else bool(marker.kwargs.get("on", True))


def _frozen_heap() -> None:
    """The test process's heap, collected and frozen once (again if a test thawed it): an
    operator started in a process with a frozen heap leaves it alone (`kopf_csi.heap`), where
    it would collect all of it at every start (0.2-1 s, its loop held) and thaw it at stop."""
    if gc.get_freeze_count() == 0:
        gc.collect()
        gc.freeze()


@_async_fixture
async def cluster(
    cluster_nodes: tuple[str, ...], kit_rbac: bool, handler_modules: tuple[str, ...]
) -> AsyncIterator[EmulatedCluster]:
    _frozen_heap()
    try:
        from kopf_csi.testing.emulator import EmulatedCluster
        from kopf_csi.testing.permissions import cluster_arguments
    except ImportError as exc:  # kmock, aiohttp's server, yaml
        pytest.fail(f"{MISSING.format(exc.name)} ({exc})", pytrace=False)
    arguments = cluster_arguments(kit_rbac=kit_rbac, handler_modules=handler_modules)
    async with EmulatedCluster(**arguments) as cluster:
        for node in cluster_nodes:
            seed_node(cluster, node)
        yield cluster


@pytest.fixture
def kubeconfig(cluster: EmulatedCluster, tmp_path: pathlib.Path) -> pathlib.Path:
    """The test's own kubeconfig for `cluster`: cluster-admin's, as kind's is (kubectl,
    explain, the test's clients): without credentials, which the kit's cluster serves as
    cluster-admin. Not the operator's: that is `operator_kubeconfig`."""
    return cluster.write_kubeconfig(tmp_path / "kubeconfig")


@pytest.fixture
def operator_kubeconfig(
    cluster: EmulatedCluster,
    tmp_path: pathlib.Path,
    kit_rbac: bool,
    handler_modules: tuple[str, ...],
) -> Generator[pathlib.Path, None, None]:
    """The operator's kubeconfig (`settings` use it): under `kit_rbac`, its ServiceAccount's
    token. A request the cluster refused fails the test at the end, even one the operator
    shrugged off, quoting the 403s and the declarations that would grant them."""
    authorizer = cluster.authorizer
    if not kit_rbac:
        yield cluster.write_kubeconfig(tmp_path / "operator-kubeconfig")
        return
    if authorizer is None:
        pytest.fail(NO_AUTHORIZER, pytrace=False)
    from kopf_csi.testing.permissions import OPERATOR, refusals

    token = authorizer.login(OPERATOR)
    yield cluster.write_kubeconfig(tmp_path / "operator-kubeconfig", token=token)
    if authorizer.denials:
        pytest.fail(refusals(authorizer, handler_modules), pytrace=False)


NO_AUTHORIZER = (
    "kit_rbac is on (the default), but this test's `cluster` authorizes nothing: build it with"
    " `EmulatedCluster(..., **permissions.cluster_arguments(kit_rbac=kit_rbac,"
    " handler_modules=handler_modules))`, or mark the test `kit_rbac(False)`, saying why"
)


@_async_fixture
async def kcm(cluster: EmulatedCluster) -> AsyncIterator[ControllerManager]:
    """The kube-controller-manager stand-in (`kopf_csi.testing.kcm`): binds claims to volumes,
    releases volumes of deleted claims, and attaches (makes VolumeAttachments for the pods'
    nodes), as KCM's persistentvolume-binder and attach/detach controllers do."""
    from kopf_csi.testing.kcm import ControllerManager

    async with ControllerManager(cluster) as kcm:
        yield kcm


@_async_fixture
async def snapshot_controller(cluster: EmulatedCluster) -> AsyncIterator[SnapshotController]:
    """The snapshot-controller stand-in (`kopf_csi.testing.snapshots`, with its group side,
    `kopf_csi.testing.groupsnapshots`): a VolumeSnapshot of a Bound claim gets its class (the
    named one, or its driver's default) and its VolumeSnapshotContent, which the operator's
    snapshotter then cuts on the driver; the snapshot's status follows its content's. What it
    leaves out is listed in those modules."""
    from kopf_csi.testing.groupsnapshots import GroupSnapshotController

    async with GroupSnapshotController(cluster) as controller:
        yield controller


@pytest.fixture
def socket_path(tmp_path: pathlib.Path) -> pathlib.Path:
    return tmp_path / "csi.sock"


@pytest.fixture
def driver_config(tmp_path: pathlib.Path) -> DriverConfig:
    return DriverConfig(
        node_id=NODE,
        data_dir=tmp_path / "driver",
        known_nodes=None,
        features=Features(attach=True),
        limits=Limits(total_capacity=KIT_CAPACITY),
        durable=False,
    )


@_async_fixture
async def driver(driver_config: DriverConfig, socket_path: pathlib.Path) -> AsyncIterator[Driver]:
    async with running_driver(driver_config, socket_path=socket_path, grace=0.1) as driver:
        yield driver


@pytest.fixture
def handler_modules() -> tuple[str, ...]:
    return DEFAULT_MODULES


@pytest.fixture
def settings(
    operator_kubeconfig: pathlib.Path, socket_path: pathlib.Path, kit_rbac: bool
) -> Settings:
    """Under `kit_rbac`, the operator's namespace is its ServiceAccount's, where its Role is."""
    namespace = rbac.NAMESPACE if kit_rbac else KubeSettings.namespace
    return Settings(
        csi=CSISettings(address=f"unix://{socket_path}", timeout=5.0, connect_timeout=10.0),
        kube=KubeSettings(kubeconfig=operator_kubeconfig, namespace=namespace),
    )


@_async_fixture
async def operator(
    settings: Settings,
    driver: Driver,
    handler_modules: tuple[str, ...],
    kit_rbac: bool,
    kubeconfig: pathlib.Path,
) -> AsyncIterator[OperatorThread]:
    if kit_rbac and (
        settings.kube.kubeconfig == kubeconfig or settings.kube.namespace != rbac.NAMESPACE
    ):
        pytest.fail(NOT_AS_DEPLOYED, pytrace=False)
    async with running_operator(settings=settings, modules=handler_modules) as operator:
        yield operator
        # The test is over: a CSI call the driver holds (an injected hang) ends now, as the
        # driver's stop would end it, not after the operator's grace (5 s) for work in flight.
        driver.release_hangs()


NOT_AS_DEPLOYED = (
    "under kit_rbac (the default) the operator runs as its ServiceAccount, with"
    f" `operator_kubeconfig`, in namespace {rbac.NAMESPACE!r} (where its Role is); this test's"
    " `settings` give it `kubeconfig` (the test's, cluster-admin) or another namespace: build"
    " them from the kit's `settings` (`dataclasses.replace`), or mark the test `kit_rbac(False)`,"
    " saying why"
)
