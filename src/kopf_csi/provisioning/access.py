"""Reading and guarded writing of the objects the provisioner touches.

Shared by the claim, source and volume operations: a secret's data as CreateVolume and
DeleteVolume get it (with external-provisioner's error text), and finalizer changes guarded
against a stale cache (a merge patch carrying the resourceVersion: 409 when stale).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import structlog

from kopf_csi import kube
from kopf_csi.provisioning import secrets
from kopf_csi.provisioning.errors import ProvisioningError
from kopf_csi.provisioning.states import ProvisioningState

__all__ = [
    "escape",
    "meta",
    "read_secret_data",
    "remove_finalizer",
    "replace_finalizers",
    "uid",
    "update_finalizers",
]

log = structlog.get_logger("kopf_csi.provisioning")
Body = Mapping[str, Any]


def meta(obj: Body) -> Mapping[str, Any]:
    metadata: Mapping[str, Any] = obj.get("metadata", {})
    return metadata


def uid(obj: Body) -> str:
    return str(meta(obj).get("uid", ""))


def escape(key: str) -> str:
    """A JSON-pointer segment (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")


async def read_secret_data(
    api: kube.KubeClient, ref: secrets.SecretRef | None, *, required: bool
) -> dict[str, str]:
    """The secret's decoded data; a missing one is an error if `required`, else logged."""
    if ref is None:
        return {}
    cause: Exception
    try:
        return kube.decode_secret_data(await api.read(kube.SECRETS, ref.name, ref.namespace))
    except kube.UnavailableError:
        # The API server is away: the secret is there, unread. Not even a deletion goes on
        # without it (external-provisioner goes on for a secret it cannot get, as one deleted
        # meanwhile): the attempt is retried once the server is back (`reachability`).
        raise
    except kube.KubeError as exc:
        error, cause = exc.message, exc  # the API's own text, as client-go's err prints
    except ValueError as exc:
        error, cause = str(exc), exc
    # external-provisioner's getCredentials, verbatim.
    message = f"error getting secret {ref.name} in namespace {ref.namespace}: {error}"
    if required:
        raise ProvisioningError(message, state=ProvisioningState.NO_CHANGE) from cause
    log.warning("secret_unavailable", secret=f"{ref.namespace}/{ref.name}", error=error)
    return {}


async def replace_finalizers(
    api: kube.KubeClient, resource: kube.Resource, obj: Body, finalizers: list[str]
) -> Body:
    """Replace an object's finalizers, guarded by the resourceVersion read (`kube.guarded_patch`).

    A stale copy (external-provisioner #1217: two sidecars patching one PV's finalizers)
    then fails with 409 (`kube.StaleWriteError`) and is retried with a fresh read, instead of
    dropping the other writer's finalizer.
    """
    metadata = meta(obj)
    patch = kube.guarded_patch(obj, {"metadata": {"finalizers": finalizers}})
    return await api.patch(resource, metadata["name"], patch, metadata.get("namespace"))


async def remove_finalizer(
    api: kube.KubeClient, resource: kube.Resource, obj: Body, finalizer: str
) -> Body | None:
    """Remove one finalizer of ours, whatever else changed meanwhile; None once it is gone.

    A strategic-merge patch (``$deleteFromPrimitiveList``, as client-go and kubectl remove a
    list item) needs no resourceVersion: it removes only this item, so it can neither lose a
    race nor drop another writer's finalizer. A guarded replace from the cache lost its race
    on every PV deletion in the benchmark, where the pv-protection controller and the DELETE
    write the PV first (a lost race, a GET and a second PATCH per volume; docs/benchmarks.md).
    Built-in kinds only: a real API server refuses strategic merge for custom resources (415).
    """
    metadata = meta(obj)
    if finalizer not in (metadata.get("finalizers") or ()):
        return obj
    patch = {"metadata": {"$deleteFromPrimitiveList/finalizers": [finalizer]}}
    try:
        return await api.patch(
            resource, metadata["name"], patch, metadata.get("namespace"), patch_type="strategic"
        )
    except kube.NotFoundError:
        return None


async def update_finalizers(
    api: kube.KubeClient,
    resource: kube.Resource,
    obj: Body,
    change: Callable[[Body], list[str] | None],
) -> Body | None:
    """Set the finalizers `change(obj)` asks for (None: leave them), re-reading on a lost race.

    The write is guarded by the resourceVersion of what `change` looked at. When someone else
    wrote the object first (409: on a real server the PV controller and the
    pv-protection controller write a PV within milliseconds of its deletion), the object is
    read again and `change` decides again, quietly: a lost race is not a failure. Returns the
    object as written (or as last read, if nothing needed changing), or None once it is gone.
    Raises `kube.StaleWriteError` only if every attempt lost its race.
    """
    metadata = meta(obj)

    async def write(current: Body) -> Body:
        finalizers = change(current)
        if finalizers is None:
            return current
        return await replace_finalizers(api, resource, current, finalizers)

    async def read() -> Body | None:
        log.debug("finalizer_write_raced", obj=metadata.get("name"))
        return await api.get(resource, metadata["name"], metadata.get("namespace"))

    try:
        return await kube.retry_on_conflict(write, obj, read=read)
    except kube.NotFoundError:
        return None
