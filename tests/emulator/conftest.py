"""Fixtures for the emulator tests: a fresh cluster per test, a kubeconfig, clients, kopf."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import kopf
import pytest
import yaml
from kubernetes_asyncio import client, config

from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.kcm import ControllerManager


@pytest.fixture
def storage_protection() -> bool:
    """The admission's pvc-/pv-protection finalizers; off where claims are just a sample kind."""
    return True


@pytest.fixture
async def cluster(storage_protection: bool) -> AsyncIterator[EmulatedCluster]:
    async with EmulatedCluster(storage_protection=storage_protection) as cluster:
        yield cluster


@pytest.fixture
def kubeconfig(cluster: EmulatedCluster, tmp_path: Path) -> Path:
    return cluster.write_kubeconfig(tmp_path / "kubeconfig")


@pytest.fixture
async def api(kubeconfig: Path) -> AsyncIterator[client.ApiClient]:
    # KUBECONFIG is read at import time by kubernetes-asyncio: always pass the file explicitly.
    api_client = await config.new_client_from_config(config_file=str(kubeconfig))
    async with api_client:
        yield api_client


@pytest.fixture
def core(api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)


@pytest.fixture
async def kcm(cluster: EmulatedCluster) -> AsyncIterator[ControllerManager]:
    async with ControllerManager(cluster) as kcm:
        yield kcm


RunKopf = Callable[[kopf.OperatorRegistry], contextlib.AbstractAsyncContextManager[None]]


@pytest.fixture
def run_kopf(cluster: EmulatedCluster) -> RunKopf:
    """Run kopf against the cluster in its own thread and loop (stack-notes: embedding)."""

    @contextlib.asynccontextmanager
    async def run(registry: kopf.OperatorRegistry) -> AsyncIterator[None]:
        @kopf.on.login(registry=registry)
        def login(**_: Any) -> kopf.ConnectionInfo:
            return kopf.ConnectionInfo(server=cluster.url)

        settings = kopf.OperatorSettings()
        settings.persistence.finalizer = "test.kopf-csi.dev/finalizer"
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(
            prefix="test.kopf-csi.dev"
        )
        settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
            prefix="test.kopf-csi.dev"
        )
        settings.posting.enabled = False
        ready, stop = threading.Event(), threading.Event()
        errors: list[BaseException] = []

        def target() -> None:
            try:
                asyncio.run(
                    kopf.operator(
                        registry=registry,
                        settings=settings,
                        clusterwide=True,
                        standalone=True,
                        ready_flag=ready,
                        stop_flag=stop,
                    )
                )
            except BaseException as exc:  # reported below, in the test's thread
                errors.append(exc)
            finally:
                ready.set()

        thread = threading.Thread(target=target, name="kopf", daemon=True)
        thread.start()
        await asyncio.to_thread(ready.wait, 10)
        try:
            yield
        finally:
            stop.set()
            await asyncio.to_thread(thread.join, 10)
        assert not thread.is_alive(), "kopf did not stop"
        assert not errors, errors

    return run


@pytest.fixture(scope="session")
def crds() -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Each CRD of manifests/crds with its one served version (the emulator's snapshot kinds
    are held to them)."""
    found = []
    for path in sorted((Path(__file__).resolve().parents[2] / "manifests" / "crds").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "CustomResourceDefinition":
                (version,) = doc["spec"]["versions"]
                found.append((doc, version))
    return found
