"""Example handler module: per-namespace limits on claims, the size of one and the sum of all.

Load it beside the default modules: `kopf-csi run -m kopf_csi_handlers.examples.namespace_quota`.
It watches Namespaces (RBAC: `list` and `watch` on `namespaces`, declared below, shipped in
`manifests/modules/namespace-quota`, printed by `kopf-csi rbac -m ...`).

Two annotations on a Namespace, each optional:

- `quota.kopf-csi.kopf.dev/max-volume-size: 10Gi`: no claim of the namespace gets a larger
  volume from this driver;
- `quota.kopf-csi.kopf.dev/storage-budget: 100Gi`: the requests of the namespace's claims
  bound and being provisioned add up to no more than that.

A claim over either is not provisioned: it gets a `ProvisioningFailed` event saying why, and
stays Pending. It is retried with the usual backoff, so raising the limit (or deleting other
claims) lets it through without anything else to do. A limit that is not a quantity refuses
every claim of that namespace, saying so, rather than none.

The budget is safe under concurrency: the provisioner works on many claims at once
(`--worker-threads`), and two claims that each fit could pass the budget together. The hook
reserves its claim's request with `context.reserve`, which checks and holds in one step; the
claims bound already are counted from a list of the namespace's claims (after a restart, they
are all there is).

The limits come from kopf's watch on Namespaces into a dict: no API call per claim for them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import kopf

from kopf_csi import api

ANNOTATION = "quota.kopf-csi.kopf.dev/max-volume-size"
BUDGET_ANNOTATION = "quota.kopf-csi.kopf.dev/storage-budget"

api.rbac.declare(
    api.rbac.cluster(api.NAMESPACES, "list", "watch", why="the limits' annotations, watched"),
)


def refusal(namespace: str, limit: str | None, required_bytes: int) -> str | None:
    """Why a claim of `required_bytes` may not be provisioned under `limit`; None if it may."""
    if limit is None:
        return None
    try:
        limit_bytes = api.quantity_bytes(limit)
    except api.QuantityError:
        return f"namespace {namespace} has an invalid {ANNOTATION} annotation: {limit!r}"
    if required_bytes <= limit_bytes:
        return None
    return (
        f"the claim requests {api.format_binary_si(required_bytes)}, above the {limit} limit "
        f"of namespace {namespace} ({ANNOTATION})"
    )


def requested_bytes(claim: Mapping[str, Any]) -> int:
    """A claim's storage request in bytes (0 if it has none, or a broken one)."""
    requests = claim.get("spec", {}).get("resources", {}).get("requests") or {}
    try:
        return api.quantity_bytes(str(requests.get("storage", "0")))
    except api.QuantityError:
        return 0


def bound_requests(claims: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """The requests of the claims bound to a volume already, by uid (the pure part)."""
    return {
        claim["metadata"]["uid"]: requested_bytes(claim)
        for claim in claims
        if claim.get("spec", {}).get("volumeName") and claim.get("metadata", {}).get("uid")
    }


class NamespaceLimits:
    """The annotations' values per namespace, kept current by the watch below."""

    def __init__(self) -> None:
        self.limits: dict[str, str] = {}
        self.budgets: dict[str, str] = {}

    def observe(self, namespace: Mapping[str, Any], *, deleted: bool) -> None:
        meta = namespace.get("metadata", {})
        name = meta.get("name", "")
        annotations = {} if deleted else (meta.get("annotations") or {})
        for values, annotation in ((self.limits, ANNOTATION), (self.budgets, BUDGET_ANNOTATION)):
            if annotation in annotations:
                values[name] = annotations[annotation]
            else:
                values.pop(name, None)

    async def check(
        self,
        claim: Mapping[str, Any],
        storage_class: Mapping[str, Any],
        request: api.CreateVolumeRequest,
        *,
        context: api.HookContext,
    ) -> None:
        namespace = claim.get("metadata", {}).get("namespace", "")
        required = request.capacity_range.required_bytes if request.capacity_range else 0
        message = refusal(namespace, self.limits.get(namespace), required)
        if message is not None:
            raise api.Refused(message)
        budget = self.budgets.get(namespace)
        if budget is not None:
            await self._reserve(namespace, budget, required, context)

    async def _reserve(
        self, namespace: str, budget: str, required: int, context: api.HookContext
    ) -> None:
        try:
            budget_bytes = api.quantity_bytes(budget)
        except api.QuantityError:
            raise api.Refused(
                f"namespace {namespace} has an invalid {BUDGET_ANNOTATION} annotation: {budget!r}"
            ) from None
        claims = await context.api.list(api.CLAIMS, namespace)
        try:
            context.reserve(
                f"namespace/{namespace}", required, limit=budget_bytes,
                counted=bound_requests(claims),
            )  # fmt: skip
        except api.OverBudget as exc:
            raise api.Refused(
                f"the claim requests {api.format_binary_si(required)}, and namespace "
                f"{namespace} has {api.format_binary_si(exc.used)} of its {budget} budget "
                f"in use or reserved ({BUDGET_ANNOTATION})"
            ) from None


@kopf.on.startup(id="examples.namespace_quota")
async def register(memo: kopf.Memo, **_: Any) -> None:
    memo.namespace_limits = limits = NamespaceLimits()
    api.create_volume_hooks(memo).append(limits.check)


@kopf.on.event("", "v1", "namespaces", id="examples.namespace_quota.namespaces")
async def namespace_changed(memo: kopf.Memo, event: kopf.RawEvent, **_: Any) -> None:
    memo.namespace_limits.observe(event["object"], deleted=event.get("type") == "DELETED")
