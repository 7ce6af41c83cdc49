"""The end-to-end suite on a kind cluster: `nox -s kind` creates the cluster, deploys
manifests/kind with the image it built, and runs these tests with the cluster's kubeconfig in
`$KOPF_CSI_KIND_KUBECONFIG`.

Every test here is marked `kind`: tests/conftest.py skips them where Docker or kind is not
installed, and `kind_kubeconfig` skips them when run outside that session (no cluster).
They talk to the cluster through kubectl, as a user would.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

KUBECONFIG_ENV = "KOPF_CSI_KIND_KUBECONFIG"


class Kubectl:
    """kubectl against one cluster (and by default one namespace)."""

    def __init__(self, kubeconfig: pathlib.Path, namespace: str | None = None) -> None:
        self.kubeconfig, self.namespace = kubeconfig, namespace

    def __call__(self, *args: str, stdin: str | None = None, timeout: float = 120) -> str:
        binary = shutil.which("kubectl")
        assert binary is not None, "kubectl is not installed"
        command = [binary, "--kubeconfig", str(self.kubeconfig)]
        if self.namespace:
            command += ["--namespace", self.namespace]
        done = subprocess.run(
            [*command, *args], input=stdin, capture_output=True, text=True, timeout=timeout
        )
        assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr.strip()}"
        return done.stdout

    def apply(self, *objects: dict[str, Any]) -> None:
        self("apply", "-f", "-", stdin="\n---\n".join(json.dumps(obj) for obj in objects))

    def get(self, *args: str) -> Any:
        return json.loads(self("get", *args, "--output=json"))

    def wait(self, target: str, condition: str, *, timeout: int = 180) -> None:
        self("wait", target, f"--for={condition}", f"--timeout={timeout}s", timeout=timeout + 30)


@pytest.fixture(scope="session")
def kind_kubeconfig() -> pathlib.Path:
    path = os.environ.get(KUBECONFIG_ENV)
    if not path:
        pytest.skip(f"no kind cluster: run `nox -s kind` (it sets ${KUBECONFIG_ENV})")
    return pathlib.Path(path)


@pytest.fixture
def namespace(kind_kubeconfig: pathlib.Path) -> Iterator[str]:
    """A fresh namespace per test, deleted (with its claims, hence volumes) afterwards."""
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    cluster = Kubectl(kind_kubeconfig)
    cluster("create", "namespace", name)
    yield name
    cluster("delete", "namespace", name, "--wait=true", timeout=300)


@pytest.fixture
def kubectl(kind_kubeconfig: pathlib.Path, namespace: str) -> Kubectl:
    return Kubectl(kind_kubeconfig, namespace)


@pytest.fixture
def cluster(kind_kubeconfig: pathlib.Path) -> Kubectl:
    return Kubectl(kind_kubeconfig)
