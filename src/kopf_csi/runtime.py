"""The kopf glue: our settings and outcomes in kopf's terms. The only library module importing kopf.

Handler modules call these helpers so that they stay thin and so that the names kopf writes
onto core objects (annotations, finalizers) are ours and stable.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any

import kopf

from kopf_csi import kube
from kopf_csi.caches import Caches
from kopf_csi.settings import Settings

__all__ = [
    "ANNOTATIONS_PREFIX",
    "caches_from_memo",
    "configure_kopf",
    "connection_info",
    "settings_from_memo",
    "wait_for_driver",
]

ANNOTATIONS_PREFIX = "kopf-csi.kopf.dev"
"""Where kopf keeps its progress on our objects: `kopf-csi.kopf.dev/<handler id>`."""


def configure_kopf(settings: kopf.OperatorSettings, *, registry: Any = None) -> None:
    """Use our own annotation names (never kopf's defaults) on the core objects we touch.

    When no handler in the registry reacts to changes (create/update/delete/resume), as with
    our own modules, which only watch events, kopf's diff-base is never used; kopf still builds
    it (two deep copies and a diff of every object, on every watch event), a fifth of the
    operator's CPU per volume (docs/benchmarks.md). Then it gets a storage that builds nothing.
    A user's module with change handlers keeps the real one.
    """
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(
        prefix=ANNOTATIONS_PREFIX
    )
    storage_class = (
        kopf.AnnotationsDiffBaseStorage if _has_change_handlers(registry) else _NoDiffBase
    )
    settings.persistence.diffbase_storage = storage_class(
        prefix=ANNOTATIONS_PREFIX, key="last-handled-configuration"
    )
    settings.persistence.finalizer = f"{ANNOTATIONS_PREFIX}/finalizer"
    settings.posting.level = 20  # INFO: Normal events too, not only warnings


def settings_from_memo(memo: Any) -> Settings:
    """The settings an entry point put into the memo, or the environment's under `kopf run`."""
    settings = getattr(memo, "settings", None)
    if isinstance(settings, Settings):
        return settings
    settings = Settings.from_env()
    memo.settings = settings
    return settings


async def connection_info(settings: Settings) -> kopf.ConnectionInfo:
    """Log in once with kubernetes-asyncio and give kopf the same credentials."""
    creds = await kube.login(settings.kube.kubeconfig)
    return kopf.ConnectionInfo(**dataclasses.asdict(creds))


def caches_from_memo(memo: Any) -> Caches:
    """The shared caches `lifecycle.connect` created (before any watch starts)."""
    caches = getattr(memo, "caches", None)
    if not isinstance(caches, Caches):
        raise kopf.PermanentError("the caches are missing: load handlers.lifecycle")
    return caches


async def wait_for_driver(memo: Any, *, timeout: float) -> None:
    """Let a controller's start-up wait for `lifecycle.connect` (kopf runs them concurrently)."""
    deadline = time.monotonic() + timeout
    while getattr(memo, "driver", None) is None:
        if time.monotonic() > deadline:
            raise kopf.PermanentError(
                f"the CSI driver was not connected within {timeout:g}s: load handlers.lifecycle"
            )
        await asyncio.sleep(0.02)


class _NoDiffBase(kopf.AnnotationsDiffBaseStorage):
    """Diff-base storage for registries without change handlers: nothing to build or fetch."""

    def build(self, *, body: Any, extra_fields: Any = None) -> Any:
        return {}

    def fetch(self, *, body: Any) -> None:
        return None


def _has_change_handlers(registry: Any) -> bool:
    """Whether any create/update/delete/resume handler is registered (kopf private API)."""
    if registry is None:
        registry = kopf.get_default_registry()
    changing = getattr(registry, "_changing", None)
    return changing is None or bool(changing.get_all_handlers())
