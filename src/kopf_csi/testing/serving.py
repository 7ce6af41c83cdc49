"""The emulated API over HTTP: each request authorized, delayed by the latency model, routed
(resources, discovery through kmock, OpenAPI), its faults taken, and translated into the
store's verbs: GET, LIST (paginated, or a Table for kubectl), WATCH (streamed, with bookmarks,
410 as an ERROR event, cut by a fault), POST, PUT, PATCH (merge, strategic, JSON), DELETE and
DELETE on a collection, with field validation.

Part of the emulator (``emulator.py`` puts the parts together); built on the object store
(``store.py``), which every HTTP write goes through as the Python-level API's writes do.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp.web
import kmock

from kopf_csi.testing import apimachinery, discovery, openapi, tables
from kopf_csi.testing.apimachinery import StatusError
from kopf_csi.testing.authorization import Authorizer
from kopf_csi.testing.faults import LOST_ANSWER, OTHER_WRITER, Faults
from kopf_csi.testing.kinds import Body, Kind
from kopf_csi.testing.latency import WRITE_METHODS, Latency, LatencyModel, uniform_writes
from kopf_csi.testing.outages import ControlPlane, Verdict, shutting_down_status, status_bytes
from kopf_csi.testing.requestlog import RequestLog
from kopf_csi.testing.store import ObjectStore, PatchType, patch_function
from kopf_csi.testing.watches import HttpWatch, dumps, event_line

__all__ = ["HttpServing", "Target", "parse_path", "request_verb"]

_VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]
_KMOCK_LOG_LIMIT = 100  # discovery requests kept by kmock (it re-filters them per request)


class _Discovery(kmock.KubernetesScaffold):
    """kmock's discovery endpoints; resource requests never reach it."""

    async def _handle(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        # kmock logs every request and re-filters the log on each one: keep it short.
        del self._requests[:-_KMOCK_LOG_LIMIT]
        for payload in self._payloads:
            del payload._requests[:-_KMOCK_LOG_LIMIT]
        if self._errors:
            del self._errors[-1][:-_KMOCK_LOG_LIMIT]
        response: aiohttp.web.StreamResponse = await super()._handle(request)
        return response

    kinds: Mapping[tuple[str, str, str], Kind] = {}  # the cluster's, set by it

    async def _serve_version(self, request: kmock.Request) -> kmock.Payload:
        """A group version's resources with the real server's facts (``discovery``)."""
        assert request.resource is not None  # kmock routes only /api/<v> and /apis/<g>/<v> here
        group, version = str(request.resource.group), str(request.resource.version)
        if group and not any(k[:2] == (group, version) for k in self.kinds):
            raise kmock.KubernetesResourceNotFoundError()
        return discovery.group_version(group, version, self.kinds.values())

    async def _serve_server_version(self, request: kmock.Request) -> kmock.Payload:
        return discovery.server_version()

    async def _serve_api(self, request: kmock.Request) -> kmock.Payload:
        return discovery.core_versions(request.url.host or "", request.url.port)


@dataclasses.dataclass(frozen=True)
class Target:
    group: str
    version: str
    namespace: str | None
    plural: str
    name: str | None
    subresource: str | None


def parse_path(path: str) -> Target | None:
    parts = [part for part in path.split("/") if part]
    if len(parts) >= 2 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] not in ("status", "finalize"):
        namespace, rest = rest[1], rest[2:]
    if not rest:
        return None  # discovery
    name = rest[1] if len(rest) > 1 else None
    return Target(group, version, namespace, rest[0], name, "/".join(rest[2:]) or None)


def _truthy(value: str | None) -> bool:
    return (value or "").lower() in ("true", "1")


def request_verb(method: str, target: Target, params: Mapping[str, str]) -> str | None:
    if method == "GET":
        return "watch" if _truthy(params.get("watch")) else "get" if target.name else "list"
    verbs = (
        {"POST": "create", "DELETE": "deletecollection"}
        if target.name is None
        else {"PUT": "update", "PATCH": "patch", "DELETE": "delete"}
    )
    return verbs.get(method)


class HttpServing(ObjectStore):
    """The store served over HTTP; ``EmulatedCluster`` starts and stops the server."""

    def __init__(
        self,
        *,
        kinds: tuple[Kind, ...],
        history: int,
        bookmark_interval: float,  # kopf reconnects a watch silent for 70 s
        storage_protection: bool,
        authorizer: Authorizer | None,  # None: no authentication, everything allowed
        latency: LatencyModel,  # request durations (testing/latency.py)
    ) -> None:
        self.latency = Latency(latency)
        """How long each HTTP request waits before it is served, the server serving others
        meanwhile (a real server's writes wait for etcd); none by default."""
        self.authorizer = authorizer
        self.bookmark_interval = bookmark_interval
        self.faults = Faults()
        self.control_plane = ControlPlane()
        """The API server's and etcd's phase: serving, draining, gone (`outages`)."""
        self.requests = RequestLog()  # every HTTP request, as RBAC sees it (counts only)
        # Watch events sent on HTTP watches (initial ADDED ones included): (plural, type),
        # and their bytes by plural.
        self.watch_events: collections.Counter[tuple[str, str]] = collections.Counter()
        self.watch_bytes: collections.Counter[str] = collections.Counter()
        self._discovery = _Discovery()
        super().__init__(kinds=kinds, history=history, storage_protection=storage_protection)
        self._discovery.kinds = self._kinds

    def serve(self, kind: Kind) -> None:
        """Serve one more resource from now on (in discovery too), as a CRD once established."""
        super().serve(kind)
        self._discovery.resources[kmock.resource(kind.group, kind.version, kind.plural)] = (
            kmock.ResourceInfo(
                kind=kind.kind,
                singular=kind.kind.lower(),
                namespaced=kind.namespaced,
                verbs=_VERBS,
                subresources={"status"} if kind.status else set(),
            )
        )

    async def _on_request(self, request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        self.requests.record(request.method, request.path, request.query)
        if self.authorizer is not None:
            refusal = self.authorizer.check(
                request.method, request.path, request.query, request.headers.get("Authorization")
            )
            if refusal is not None:
                return aiohttp.web.json_response(refusal, status=refusal["code"], dumps=dumps)
        target = parse_path(request.path)
        watch = request.method == "GET" and _truthy(request.query.get("watch"))
        async with self.latency.request(request.method, target, watch=watch):  # latency.py
            verdict = self.control_plane.verdict()  # a server going away (outages.py)
            if verdict is Verdict.RESET:
                return _reset(request)
            if verdict is Verdict.SHUTTING_DOWN:
                return _shutting_down()
            if target is not None and not watch:  # discovery is served from memory
                failed = await self.control_plane.wait_for_etcd(
                    write=request.method in WRITE_METHODS
                )
                if failed is not None:
                    return aiohttp.web.json_response(failed, status=failed["code"], dumps=dumps)
            return await self._route(request, target)

    async def _route(
        self, request: aiohttp.web.BaseRequest, target: Target | None
    ) -> aiohttp.web.StreamResponse:
        if target is None and request.path.startswith("/openapi/"):
            return self._serve_openapi(request.path)
        if target is None:
            if len(request.path) > 1 and request.path.endswith("/"):  # kmock wants "/api/v1"
                request = request.clone(rel_url=request.rel_url.with_path(request.path.rstrip("/")))
            response: aiohttp.web.StreamResponse = await self._discovery(request)
            return response
        try:
            response = await self._serve(request, target)
        except StatusError as error:
            return aiohttp.web.json_response(error.status(), status=error.code, dumps=dumps)
        if request.get(_LOSE_ANSWER):
            return _reset(request)
        for warning in request.get(_WARNINGS, ()):
            response.headers.add("Warning", f'299 - "{dumps(warning)[1:-1]}"')
        return response

    @property
    def write_latency(self) -> float:
        """Seconds every HTTP write waits (a uniform model; see `latency` for a full one)."""
        return self.latency.model.write

    @write_latency.setter
    def write_latency(self, seconds: float) -> None:
        self.latency = Latency(uniform_writes(seconds))

    async def _serve(
        self, request: aiohttp.web.BaseRequest, target: Target
    ) -> aiohttp.web.StreamResponse:
        kind = self._kinds.get((target.group, target.version, target.plural))
        if kind is None or (target.namespace is not None and not kind.namespaced):
            raise StatusError(404, "the server could not find the requested resource")
        params = request.query
        verb = request_verb(request.method, target, params)
        if verb is None:
            raise StatusError(405, f"{request.method} is not supported on {request.path}")
        fault = self.faults.take(
            verb=verb, plural=kind.plural, name=target.name, subresource=target.subresource
        )
        if fault is not None and fault.code == LOST_ANSWER:
            request[_LOSE_ANSWER] = True  # served below, then the connection is dropped
            fault = None
        if fault is not None and fault.body is not None:
            return aiohttp.web.Response(
                status=fault.code, text=fault.body, content_type="application/json"
            )
        if fault is not None:
            raise StatusError(fault.code, fault.message)
        ns, name, sub = target.namespace, target.name or "", target.subresource
        race = self.faults.take_race(
            verb=verb, plural=kind.plural, name=target.name, subresource=sub
        )
        if race is not None and self._key(kind, ns, name) in self._store[kind]:
            # Someone else writes the object first, between our read and our write.
            self._count_write(OTHER_WRITER, "update", kind, None)
            self._update(kind, ns, name, race.change, None, OTHER_WRITER)
        if verb == "watch":
            return await self._serve_watch(request, kind, target)
        as_table = tables.wants_table(request.headers.get("Accept", ""))
        if verb == "list":
            items, meta = self._page(kind, ns, params)
            if as_table:
                return _table_response(kind, items, meta, params)
            body = {
                "apiVersion": kind.api_version,
                "kind": f"{kind.kind}List",
                "metadata": meta,
                "items": items,
            }
            return aiohttp.web.json_response(body, dumps=dumps)
        if verb == "get":
            if sub is not None and (sub != "status" or not kind.status):
                raise StatusError(404, f"{kind.plural} has no subresource {sub!r}")
            found = self._existing(kind, ns, name)
            if as_table and sub is None:
                meta = {"resourceVersion": found["metadata"]["resourceVersion"]}
                return _table_response(kind, [found], meta, params)
            if "as=PartialObjectMetadata" in request.headers.get("Accept", ""):
                # As the real server: the metadata alone (a Secret's data stays on the server).
                found = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                         "metadata": found.get("metadata", {})}  # fmt: skip
            return aiohttp.web.json_response(found, dumps=dumps)
        payload, duplicates = await _read_json(request)
        manager = apimachinery.manager_name(
            params.get("fieldManager"), request.headers.get("User-Agent")
        )
        self._count_write(manager, verb, kind, sub)
        warnings = request[_WARNINGS] = []
        if verb not in ("create", "update"):
            duplicates = []  # a patch's own keys are not looked for (``openapi``)
        check = _field_validation(kind, verb, params.get("fieldValidation"), warnings, duplicates)
        if verb == "update":  # the body is decoded first: its 400 comes before a 404
            check(openapi.prune(kind, payload)[1])
        if verb == "create":
            if kind.namespaced and ns is None:
                raise StatusError(405, "create namespaced objects under /namespaces/<namespace>/")
            return aiohttp.web.json_response(
                self._create(kind, ns, payload, manager, check), status=201, dumps=dumps
            )
        if verb == "deletecollection":
            if verb not in discovery.facts(kind).verbs:  # namespaces
                raise StatusError(
                    405, "the server does not allow this method on the requested resource"
                )
            return aiohttp.web.json_response(self._delete_collection(kind, ns, params), dumps=dumps)
        if verb == "delete":
            preconditions = (
                (payload or {}).get("preconditions") if isinstance(payload, dict) else None
            )
            return aiohttp.web.json_response(
                self._delete(kind, ns, name, preconditions), dumps=dumps
            )
        if verb == "update":
            result = self._update(kind, ns, name, lambda old: payload, sub, manager)
        else:
            patcher = patch_function(kind, _patch_type(request.content_type))
            result = self._update(
                kind, ns, name, lambda old: patcher(old, payload), sub, manager, check
            )
        return aiohttp.web.json_response(result, dumps=dumps)

    def _serve_openapi(self, path: str) -> aiohttp.web.Response:
        """``/openapi/v3`` and its group versions' documents (``openapi``); v2 is not served."""
        body: Mapping[str, Any] | None = None
        if path.rstrip("/") == "/openapi/v3":
            body = openapi.index(self._kinds.values())
        elif path.startswith("/openapi/v3/"):
            body = openapi.served_document(path.removeprefix("/openapi/v3/"), self._kinds.values())
        if body is None:
            error = StatusError(404, "the server could not find the requested resource")
            return aiohttp.web.json_response(error.status(), status=404, dumps=dumps)
        return aiohttp.web.json_response(body, dumps=dumps)

    async def _serve_watch(
        self, request: aiohttp.web.BaseRequest, kind: Kind, target: Target
    ) -> aiohttp.web.StreamResponse:
        params = request.query
        selectors = [
            s
            for s in (
                apimachinery.parse_label_selector(params.get("labelSelector")),
                apimachinery.parse_field_selector(params.get("fieldSelector")),
                apimachinery.parse_field_selector(
                    f"metadata.name={target.name}" if target.name else None
                ),
            )
            if s is not None
        ]
        timeout = float(params["timeoutSeconds"]) if params.get("timeoutSeconds") else None
        bookmarks = _truthy(params.get("allowWatchBookmarks"))
        since = params.get("resourceVersion") or None
        initial_events = _truthy(params.get("sendInitialEvents"))
        watch = HttpWatch(
            namespace=target.namespace,
            selectors=selectors,
            sent=self.watch_events,
            sent_bytes=self.watch_bytes,
            render=_table_events(kind, params)
            if tables.wants_table(request.headers.get("Accept", ""))
            else None,
        )
        response = aiohttp.web.StreamResponse(headers={"Content-Type": "application/json"})
        try:
            initial = since in (None, "0") or initial_events
            self._start_watch(
                kind, watch, since=since, initial=initial, end_bookmark=initial_events and bookmarks
            )
        except StatusError as error:
            if error.code != 410:
                raise
            # The real API server answers 200 and sends the 410 as an ERROR event.
            await response.prepare(request)
            await response.write(event_line("ERROR", error.status()))
            await response.write_eof()
            return response
        try:
            await response.prepare(request)
            await self._stream(
                watch, response, kind, duration=timeout, bookmarks=bookmarks,
                cut_after=self.faults.take_cut(kind.plural), transport=request.transport,
            )  # fmt: skip
        except ConnectionError:
            pass  # the client went away
        finally:
            self._listeners[kind].discard(watch)
        return response

    async def _stream(
        self,
        watch: HttpWatch,
        response: aiohttp.web.StreamResponse,
        kind: Kind,
        *,
        duration: float | None,
        bookmarks: bool,
        cut_after: int | None = None,
        transport: asyncio.Transport | None = None,
    ) -> None:
        loop = asyncio.get_running_loop()
        sent = 0
        deadline = None if duration is None else loop.time() + duration
        while True:
            wait = self.bookmark_interval if bookmarks else None
            if deadline is not None:
                if (remaining := deadline - loop.time()) <= 0:
                    break
                wait = remaining if wait is None else min(wait, remaining)
            try:
                # asyncio.timeout, not wait_for: no task per event, so an event goes out on the
                # loop's next turn, as a real server's within a millisecond (wait_for's extra
                # hops held each event back by two turns of whatever else the loop runs).
                async with asyncio.timeout(wait):
                    lines = [await watch.queue.get()]
            except TimeoutError:
                # An idle queue means everything up to the current resourceVersion was sent.
                if bookmarks and (deadline is None or loop.time() < deadline):
                    await response.write(self._bookmark(kind))
                continue
            while lines[-1] and not watch.queue.empty():
                lines.append(watch.queue.get_nowait())
            if cut_after is not None and sent + len(lines) >= cut_after:
                await response.write(b"".join(lines[: cut_after - sent]))
                if transport is not None:
                    transport.abort()  # mid-stream: no end of the chunked body
                raise ConnectionResetError("watch cut by a fault")
            sent += len(lines)
            await response.write(b"".join(lines))
            if not lines[-1]:
                break  # closed by the cluster
        await response.write_eof()


def _shutting_down() -> aiohttp.web.Response:
    """A draining server's answer to a request it no longer takes (its `WithWaitGroup`)."""
    return aiohttp.web.Response(
        status=503,
        body=status_bytes(shutting_down_status()),
        headers={"Retry-After": "1", "X-Content-Type-Options": "nosniff"},
        content_type="application/json",
    )


def _reset(request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
    """The connection closed under the request: the client reads no answer."""
    if request.transport is not None:
        request.transport.abort()
    return aiohttp.web.Response(status=500)  # never sent: the transport is gone


# A request served whose answer is lost (`Faults.lose_answer`).
_LOSE_ANSWER = aiohttp.web.RequestKey("kopf_csi_lose_answer", bool)

# A request's field validation warnings (fieldValidation=Warn, or none), for its Warning headers.
_WARNINGS = aiohttp.web.RequestKey("kopf_csi_warnings", list[str])


def _field_validation(
    kind: Kind, verb: str, directive: str | None, warnings: list[str], duplicates: list[str]
) -> Callable[[list[str]], None]:
    """``fieldValidation``: what to say of the unknown fields the store drops from the object a
    write proposes (a patch's result; ``openapi.prune``), and of the body's `duplicates`.
    Strict refuses them with the real 400, Warn (the real server's default, when the parameter
    is absent) adds them to `warnings` for the Warning headers, Ignore says nothing."""

    def check(unknown: list[str]) -> None:
        problems = [f'duplicate field "{field}"' for field in duplicates]
        problems += [f'unknown field "{field}"' for field in unknown]
        if problems and directive == "Strict":
            raise StatusError(400, openapi.strict_message(kind, problems, patch=verb == "patch"))
        if directive != "Ignore":
            warnings.extend(problems)

    return check


def _table_events(kind: Kind, params: Mapping[str, str]) -> Callable[[Body], Body]:
    """A watch asked as a Table (``kubectl get -w``): each event's object is a one-row Table,
    and only the first carries the column definitions, as the real server sends them."""
    first = True

    def render(obj: Body) -> Body:
        nonlocal first
        meta = {"resourceVersion": obj["metadata"]["resourceVersion"]}
        include = params.get("includeObject")
        table = tables.table(kind.group, kind.plural, [obj], metadata=meta, include_object=include)
        if not first:
            table["columnDefinitions"] = None
        first = False
        return table

    return render


def _table_response(
    kind: Kind, items: list[Body], meta: Mapping[str, Any], params: Mapping[str, str]
) -> aiohttp.web.Response:
    """What ``kubectl get`` asks for: a meta.k8s.io/v1 Table (``tables``)."""
    body = tables.table(
        kind.group, kind.plural, items, metadata=meta, include_object=params.get("includeObject")
    )
    return aiohttp.web.json_response(body, dumps=dumps)


def _patch_type(content_type: str) -> PatchType:
    types: dict[str, PatchType] = {
        "application/merge-patch+json": "merge",
        "application/strategic-merge-patch+json": "strategic",
        "application/json-patch+json": "json",
    }
    if content_type not in types:
        raise StatusError(415, f"the patch content type {content_type!r} is not supported")
    return types[content_type]


async def _read_json(request: aiohttp.web.BaseRequest) -> tuple[Any, list[str]]:
    """The body, and the paths of the keys it gives twice (``openapi.decode``)."""
    raw = await request.read()
    if not raw.strip():
        return None, []
    try:
        return openapi.decode(raw)
    except ValueError:
        raise StatusError(400, "the body is not valid JSON") from None
