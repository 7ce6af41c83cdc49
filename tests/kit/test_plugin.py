"""The testing kit as a user's project gets it: pytest run in a fresh project of its own.

Nothing is configured there (no `asyncio_mode`, no conftest): pytest-asyncio's defaults, in
strict mode, as in a project that has only just installed `kopf-csi[testing]`.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
import textwrap

import pytest

USER_TEST = """
import pytest
from kopf_csi.testing.pytest_plugin import NODE, until


async def test_the_cluster_has_a_usable_node(cluster):
    nodes = [node["metadata"]["name"] for node in cluster.objects("nodes")]
    csinodes = [node["spec"]["drivers"][0]["name"] for node in cluster.objects("csinodes")]
    assert nodes == [NODE]
    assert csinodes == ["hostpath.csi.kopf.dev"]



async def test_other_async_tests_are_left_alone():
    pass  # strict mode, no kit fixture: pytest-asyncio does not run it (not our business)


async def test_ends_with_a_createvolume_held(cluster, kcm, driver, operator):
    held = driver.faults.hang("CreateVolume", times=1)  # until the call's deadline
    cluster.create("storageclasses", {
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": "sc"}, "provisioner": "hostpath.csi.kopf.dev"})
    cluster.create("persistentvolumeclaims", {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data", "namespace": "default"},
        "spec": {"storageClassName": "sc", "accessModes": ["ReadWriteOnce"],
                 "resources": {"requests": {"storage": "1Mi"}}}})
    await until(lambda: held not in driver.faults.rules)  # the operator's call is held
"""

USER_TEST_NODES = """
import pytest


@pytest.fixture
def cluster_nodes():
    return ("a", "b")


async def test_nodes_can_be_chosen(cluster):
    assert sorted(node["metadata"]["name"] for node in cluster.objects("nodes")) == ["a", "b"]
"""


USER_MODULE = """
import kopf


@kopf.on.startup()
async def mark(memo, **_):
    memo.marked_by_the_user = True
"""

USER_TEST_MODULES = """
import pytest
from kopf_csi.testing.operator import DEFAULT_MODULES


@pytest.fixture
def handler_modules():
    return DEFAULT_MODULES + ("myproject.marker",)


async def test_the_users_module_runs(operator):
    assert operator.memo.marked_by_the_user
"""


def run_pytest(project: pathlib.Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", *args],
        cwd=project, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


@pytest.fixture
def project(tmp_path: pathlib.Path) -> pathlib.Path:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # not this repository's settings
    (tmp_path / "test_user.py").write_text(textwrap.dedent(USER_TEST))
    (tmp_path / "test_user_nodes.py").write_text(textwrap.dedent(USER_TEST_NODES))
    return tmp_path


def test_kit_fixtures_work_in_strict_mode_without_configuration(project: pathlib.Path) -> None:
    result = run_pytest(project)
    out = result.stdout + result.stderr
    assert "PASSED test_user.py::test_the_cluster_has_a_usable_node" in out, out
    assert "PASSED test_user_nodes.py::test_nodes_can_be_chosen" in out, out
    assert "requested an async fixture" not in out, out
    # Not marked by the kit: pytest-asyncio's strict mode leaves it to pytest, which fails it.
    assert "FAILED test_user.py::test_other_async_tests_are_left_alone" in out, out


def test_kit_fixtures_work_in_auto_mode(project: pathlib.Path) -> None:
    result = run_pytest(project, "-o", "asyncio_mode=auto", "--durations=0", "-vv")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "4 passed" in result.stdout, result.stdout
    # A CSI call the driver still holds when the test ends is released (as the driver's stop
    # would): the operator's stop does not wait its grace (5 s) for it.
    teardown = re.search(r"([\d.]+)s teardown +test_user.py::test_ends_with_a_createvolume_held",
                         result.stdout)  # fmt: skip
    assert teardown is not None, result.stdout
    assert float(teardown[1]) < 4.0, result.stdout


def test_a_dotted_module_is_found_from_the_project_folder(tmp_path: pathlib.Path) -> None:
    """As a user runs it: the `pytest` script (whose path starts with its bin directory, not the
    current one) in the project's folder, the test in `tests/`, the module in `myproject/`."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "myproject").mkdir()
    (tmp_path / "myproject" / "marker.py").write_text(textwrap.dedent(USER_MODULE))
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_mine.py").write_text(textwrap.dedent(USER_TEST_MODULES))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.pop("PYTHONPATH", None)
    result = subprocess.run(
        [pathlib.Path(sys.executable).parent / "pytest", "-p", "no:cacheprovider", "-rA"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    out = result.stdout + result.stderr
    assert "PASSED tests/test_mine.py::test_the_users_module_runs" in out, out
