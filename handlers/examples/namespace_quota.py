"""Example handler module: refuse claims above a per-namespace size limit.

Load it beside the default modules: `kopf-csi run -m kopf_csi_handlers.examples.namespace_quota`.
It needs to watch Namespaces (RBAC: `list` and `watch` on `namespaces`, shipped in
`manifests/modules/namespace-quota`).

A Namespace annotated `quota.kopf-csi.kopf.dev/max-volume-size: 10Gi` gets no volume larger
than 10Gi from this driver. A larger claim is not provisioned: it gets a `ProvisioningFailed`
event saying why, and stays Pending. It is retried with the usual backoff, so raising the limit
(or shrinking the claim's request) lets it through without anything else to do. A limit that
is not a quantity refuses every claim of that namespace, saying so, rather than none.

The limits come from kopf's watch on Namespaces into a dict; no API call per claim.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import kopf

from kopf_csi.csi import messages as csi
from kopf_csi.provisioning.hooks import Refused, create_volume_hooks
from kopf_csi.provisioning.quantities import QuantityError, format_binary_si, quantity_bytes

ANNOTATION = "quota.kopf-csi.kopf.dev/max-volume-size"


def refusal(namespace: str, limit: str | None, required_bytes: int) -> str | None:
    """Why a claim of `required_bytes` may not be provisioned under `limit`; None if it may."""
    if limit is None:
        return None
    try:
        limit_bytes = quantity_bytes(limit)
    except QuantityError:
        return f"namespace {namespace} has an invalid {ANNOTATION} annotation: {limit!r}"
    if required_bytes <= limit_bytes:
        return None
    return (
        f"the claim requests {format_binary_si(required_bytes)}, above the {limit} limit "
        f"of namespace {namespace} ({ANNOTATION})"
    )


class NamespaceLimits:
    """The annotation's value per namespace, kept current by the watch below."""

    def __init__(self) -> None:
        self.limits: dict[str, str] = {}

    def observe(self, namespace: Mapping[str, Any], *, deleted: bool) -> None:
        meta = namespace.get("metadata", {})
        limit = (meta.get("annotations") or {}).get(ANNOTATION)
        if deleted or limit is None:
            self.limits.pop(meta.get("name", ""), None)
        else:
            self.limits[meta["name"]] = limit

    async def check(
        self,
        claim: Mapping[str, Any],
        storage_class: Mapping[str, Any],
        request: csi.CreateVolumeRequest,
    ) -> None:
        namespace = claim.get("metadata", {}).get("namespace", "")
        required = request.capacity_range.required_bytes if request.capacity_range else 0
        message = refusal(namespace, self.limits.get(namespace), required)
        if message is not None:
            raise Refused(message)


@kopf.on.startup(id="examples.namespace_quota")
async def register(memo: kopf.Memo, **_: Any) -> None:
    memo.namespace_limits = limits = NamespaceLimits()
    create_volume_hooks(memo).append(limits.check)


@kopf.on.event("", "v1", "namespaces", id="examples.namespace_quota.namespaces")
async def namespace_changed(memo: kopf.Memo, event: kopf.RawEvent, **_: Any) -> None:
    memo.namespace_limits.observe(event["object"], deleted=event.get("type") == "DELETED")
