"""A user's handler module on a resource of their own (a CRD), with plain kopf; its RBAC
declared, as the kit's authorizing (on by default) asks."""

from __future__ import annotations

from typing import Any

import kopf

from kopf_csi import api

api.rbac.declare(
    api.rbac.cluster(
        "backuprequests.example.com", "list", "watch", "patch", why="kopf's watch, its marks"
    ),
    api.rbac.cluster("backuprequests/status.example.com", "patch", why="the phase"),
)


@kopf.on.create("example.com", "v1", "backuprequests")
async def accepted(spec: Any, patch: kopf.Patch, **_: Any) -> None:
    patch.status["phase"] = f"Accepted: {spec['claim']}"
