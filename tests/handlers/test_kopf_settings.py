"""The kopf settings we apply: our names on core objects, and no diff-base work when unused.

We test these aspects:
- progress and diff-base annotations use our prefix, never kopf's default;
- a registry without change handlers (our modules: event handlers only) gets a diff-base
  storage that builds nothing;
- a registry with any create/update/delete/resume handler (a user's module) keeps the real one.
"""

from __future__ import annotations

from typing import Any

import kopf

from kopf_csi import runtime


def _configured(registry: kopf.OperatorRegistry) -> kopf.OperatorSettings:
    settings = kopf.OperatorSettings()
    runtime.configure_kopf(settings, registry=registry)
    return settings


def test_our_prefix_and_finalizer() -> None:
    settings = _configured(kopf.OperatorRegistry())
    assert settings.persistence.finalizer == "kopf-csi.kopf.dev/finalizer"
    progress = settings.persistence.progress_storage
    assert isinstance(progress, kopf.AnnotationsProgressStorage)
    assert progress.prefix == "kopf-csi.kopf.dev"


def test_event_handlers_only_build_no_diff_base() -> None:
    registry = kopf.OperatorRegistry()

    @kopf.on.event("", "v1", "persistentvolumeclaims", id="watch", registry=registry)
    def watch(**_: Any) -> None:
        pass

    storage = _configured(registry).persistence.diffbase_storage
    body = kopf.Body({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                      "metadata": {"name": "x"}, "spec": {"a": 1}})  # fmt: skip
    assert storage.build(body=body) == {}
    assert storage.fetch(body=body) is None


def test_change_handlers_keep_the_real_diff_base() -> None:
    registry = kopf.OperatorRegistry()

    @kopf.on.update("", "v1", "persistentvolumeclaims", id="user.update", registry=registry)
    def on_update(**_: Any) -> None:
        pass

    storage = _configured(registry).persistence.diffbase_storage
    body = kopf.Body({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                      "metadata": {"name": "x"}, "spec": {"a": 1}})  # fmt: skip
    assert storage.build(body=body)["spec"] == {"a": 1}
    assert type(storage) is kopf.AnnotationsDiffBaseStorage
