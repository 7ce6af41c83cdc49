"""The lazy kubernetes-asyncio packages: nothing generated is loaded up front, everything works.

Each check runs in a fresh interpreter, since this one imported kubernetes-asyncio long ago.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap


def run(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_operator_imports_no_generated_models_or_apis() -> None:
    out = run("""
        import sys
        import kopf_csi, kopf
        import kopf_csi_handlers.lifecycle, kopf_csi_handlers.provisioner
        import kopf_csi_handlers.attacher
        loaded = [m for m in sys.modules if m.startswith("kubernetes_asyncio.client.")]
        models = [m for m in loaded if m.startswith("kubernetes_asyncio.client.models.")]
        apis = [m for m in loaded if m.startswith("kubernetes_asyncio.client.api.")]
        print(len(models), len(apis))
    """)
    models, apis = map(int, out.split())
    assert models <= 5  # kopf's two (V1ObjectMeta, V1OwnerReference) and what they import
    assert apis == 0


def test_every_public_name_resolves_to_the_real_object() -> None:
    out = run("""
        import re, pathlib
        import kopf_csi
        import kubernetes_asyncio
        from kubernetes_asyncio import client
        missing = []
        for package in (client, client.models, client.api):
            text = pathlib.Path(package.__file__).read_text()
            for module, name in re.findall(r"^from ([\\w.]+) import (\\w+)", text, re.M):
                real = getattr(__import__(module, fromlist=[name]), name)
                if getattr(package, name) is not real:
                    missing.append(f"{package.__name__}.{name}")
        print(len(missing), client.__version__, kubernetes_asyncio.__version__)
    """)
    count, client_version, version = out.split()
    assert count == "0"
    assert client_version == version


def test_submodules_import_as_usual_and_unknown_names_fail() -> None:
    out = run("""
        import kopf_csi
        import kubernetes_asyncio.client.rest
        from kubernetes_asyncio.client.models.v1_pod import V1Pod
        from kubernetes_asyncio import client
        assert client.models.V1Pod is V1Pod and client.V1Pod is V1Pod
        assert client.rest is kubernetes_asyncio.client.rest
        try:
            client.NoSuchThing
        except AttributeError as exc:
            print(exc)
    """)
    assert out == "module 'kubernetes_asyncio.client' has no attribute 'NoSuchThing'"


def test_nothing_changes_when_kubernetes_asyncio_came_first() -> None:
    out = run("""
        import kubernetes_asyncio.client
        import kopf_csi
        from kopf_csi import lazyk8s
        print(type(kubernetes_asyncio.client).__name__, lazyk8s.install())
    """)
    assert out == "module False"
