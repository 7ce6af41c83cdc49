"""A user's handler module on a resource of their own (a CRD), with plain kopf."""

from __future__ import annotations

from typing import Any

import kopf


@kopf.on.create("example.com", "v1", "backuprequests")
async def accepted(spec: Any, patch: kopf.Patch, **_: Any) -> None:
    patch.status["phase"] = f"Accepted: {spec['claim']}"
