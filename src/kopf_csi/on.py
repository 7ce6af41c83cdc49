"""Handlers on the operator's own claim and PV streams: `@kopf_csi.on.volume_provisioned()`.

The operator lists and watches PersistentVolumeClaims and PersistentVolumes once, with its
own informers (`kopf_csi.informers`, started by `kopf_csi_handlers.caches`). A handler module that
wants those objects too should not watch them again through kopf: `@kopf.on.create(...)` on
PVs opens a second watch of every PV beside ours (in a big cluster, twice the traffic and the
decoding of the busiest kinds) and makes kopf write its annotations onto every PV. These
decorators put a handler on the operator's streams instead, in kopf's style: a decorator, and
a handler that takes keyword arguments and ignores the others (`**_`).

    import kopf_csi.on


    @kopf_csi.on.volume_provisioned()
    async def provisioned(*, volume, claim, logger, memo, **_):
        logger.info("volume_ready", size=volume["spec"]["capacity"]["storage"])

The events:

- `claim_event`: every watch event of a claim: `type` (ADDED, MODIFIED, DELETED), `claim`;
- `volume_event`: every watch event of a PV: `type`, `volume`;
- `volume_provisioned`: a dynamically provisioned PV (one with `pv.kubernetes.io/provisioned-by`,
  by this operator or any other provisioner) appeared: `volume`, and `claim`, the claim in its
  `spec.claimRef` (None if it is gone);
- `volume_released`: a PV's phase became Released (its claim was deleted): `volume`;
- `volume_deleted`: a PV is gone from the API: `volume`, its last state.

Every handler also gets `body` (the object, as kopf names it), `logger` (a structlog logger
whose lines carry the object's kind, name and uid) and `memo` (the operator's memo: `api`,
`csi`, `caches`, ...). `provisioner="..."` on the volume decorators keeps the PVs of that
provisioner only (`pv.kubernetes.io/provisioned-by`).

What they promise: each event once, in the order the stream saw them, for the events seen
while the operator runs (objects that exist at start-up are not reported as provisioned; a
volume provisioned while the operator was down is not either). Each handler runs in a task of
its own, off the stream: a slow handler holds up only its own later events (at most
`MAX_QUEUED` wait; beyond that they are dropped with a warning), and an exception is logged
(`stream_handler_failed`, with the handler and the object) and the handler gets the next
event: it is not retried, as `@kopf.on.event` handlers are not. A standby replica (leader
election) sees nothing until it leads. Handlers need `kopf_csi_handlers.caches` loaded (a default
module). A sync function runs in a thread, as kopf runs one.

Plain `@kopf.on.*` stays the right tool for the other kinds (Namespaces, Pods, your own
resources), and for claims or PVs when you need kopf's per-object machinery itself: change
detection with a diff and retries until success (`@kopf.on.create/update/delete`, which store
their progress in annotations on the objects), finalizers, daemons and timers.
"""

from __future__ import annotations

import weakref
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol, TypeVar

import kopf

from kopf_csi.streams import Event, StreamHandler

__all__ = [
    "ClaimEventHandler",
    "StreamHandler",
    "VolumeEventHandler",
    "VolumeHandler",
    "VolumeProvisionedHandler",
    "claim_event",
    "registered",
    "volume_deleted",
    "volume_event",
    "volume_provisioned",
    "volume_released",
]

Body = Mapping[str, Any]


class ClaimEventHandler(Protocol):
    """`@claim_event()`: `async def fn(*, type, claim, logger, memo, **_)`."""

    def __call__(
        self, *, type: str, claim: Body, body: Body, logger: Any, memo: kopf.Memo, **kwargs: Any
    ) -> Awaitable[None] | None: ...


class VolumeEventHandler(Protocol):
    """`@volume_event()`: `async def fn(*, type, volume, logger, memo, **_)`."""

    def __call__(
        self, *, type: str, volume: Body, body: Body, logger: Any, memo: kopf.Memo, **kwargs: Any
    ) -> Awaitable[None] | None: ...


class VolumeProvisionedHandler(Protocol):
    """`@volume_provisioned()`: `async def fn(*, volume, claim, logger, memo, **_)`."""

    def __call__(
        self,
        *,
        volume: Body,
        claim: Body | None,
        body: Body,
        logger: Any,
        memo: kopf.Memo,
        **kwargs: Any,
    ) -> Awaitable[None] | None: ...


class VolumeHandler(Protocol):
    """`@volume_released()`, `@volume_deleted()`: `async def fn(*, volume, logger, memo, **_)`."""

    def __call__(
        self, *, volume: Body, body: Body, logger: Any, memo: kopf.Memo, **kwargs: Any
    ) -> Awaitable[None] | None: ...


_registered: weakref.WeakKeyDictionary[Any, list[StreamHandler]] = weakref.WeakKeyDictionary()

F = TypeVar("F", bound=Callable[..., Any])
CE = TypeVar("CE", bound=ClaimEventHandler)
VE = TypeVar("VE", bound=VolumeEventHandler)
VP = TypeVar("VP", bound=VolumeProvisionedHandler)
VH = TypeVar("VH", bound=VolumeHandler)


def registered(registry: Any = None) -> list[StreamHandler]:
    """The handlers registered into `registry` (kopf's default one if None)."""
    return list(_registered.get(registry or kopf.get_default_registry(), ()))


def _decorator(
    event: Event, *, id: str | None, provisioner: str | None, registry: Any
) -> Callable[[F], F]:
    def decorate(fn: F) -> F:
        # Decided now, as kopf's decorators do: `modules.load` makes each run's registry the
        # default while it imports the handler modules.
        target = registry or kopf.get_default_registry()
        name = id or f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"
        handler = StreamHandler(event=event, fn=fn, id=name, provisioner=provisioner)
        _registered.setdefault(target, []).append(handler)
        return fn

    return decorate


def claim_event(*, id: str | None = None, registry: Any = None) -> Callable[[CE], CE]:
    """Every watch event of every claim, from the operator's own watch (see the module)."""
    return _decorator("claim_event", id=id, provisioner=None, registry=registry)


def volume_event(
    *, id: str | None = None, provisioner: str | None = None, registry: Any = None
) -> Callable[[VE], VE]:
    """Every watch event of every PV, from the operator's own watch (see the module)."""
    return _decorator("volume_event", id=id, provisioner=provisioner, registry=registry)


def volume_provisioned(
    *, id: str | None = None, provisioner: str | None = None, registry: Any = None
) -> Callable[[VP], VP]:
    """A dynamically provisioned PV appeared: `volume` and its `claim` (see the module)."""
    return _decorator("volume_provisioned", id=id, provisioner=provisioner, registry=registry)


def volume_released(
    *, id: str | None = None, provisioner: str | None = None, registry: Any = None
) -> Callable[[VH], VH]:
    """A PV's phase became Released: its claim is gone (see the module)."""
    return _decorator("volume_released", id=id, provisioner=provisioner, registry=registry)


def volume_deleted(
    *, id: str | None = None, provisioner: str | None = None, registry: Any = None
) -> Callable[[VH], VH]:
    """A PV was deleted from the API: `volume` is its last state (see the module)."""
    return _decorator("volume_deleted", id=id, provisioner=provisioner, registry=registry)
