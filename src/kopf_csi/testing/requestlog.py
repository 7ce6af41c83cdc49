"""What an API client asked for, in RBAC terms: a request log for the emulated cluster.

Each HTTP request is classified the way the API server's authorizer sees it (the Go
``RequestInfoFactory``): a resource request becomes an ``Access`` (verb, API group, resource,
subresource, the namespace it was scoped to), anything else (``/api``, ``/apis/...`` discovery,
``/version``, ``/healthz``) a non-resource URL. The log keeps counts, not requests: its size is
bounded by the distinct accesses, so it can stay on during benchmarks.

What does not belong here: deciding whether RBAC allows an access (``authorization``), and
serving anything.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterator, Mapping

__all__ = ["Access", "RequestLog", "classify", "classify_named"]

# Path segments after /namespaces/<name> that are subresources of the namespace itself.
_NAMESPACE_SUBRESOURCES = frozenset({"status", "finalize"})
_WRITE_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


@dataclasses.dataclass(frozen=True)
class Access:
    """One resource request as RBAC sees it; ``namespace`` is None for cluster-wide requests."""

    verb: str
    group: str
    resource: str
    subresource: str | None = None
    namespace: str | None = None

    @property
    def rbac_resource(self) -> str:
        """The name an RBAC rule lists: ``plural`` or ``plural/subresource``."""
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource

    @property
    def sort_key(self) -> tuple[str, str, str, str, str]:
        return (self.group, self.resource, self.subresource or "", self.verb, self.namespace or "")

    def __str__(self) -> str:
        where = f" in {self.namespace}" if self.namespace else " cluster-wide"
        return f"{self.verb} {self.group or 'core'}/{self.rbac_resource}{where}"


def _truthy(value: str | None) -> bool:
    return (value or "").lower() in ("true", "1")


def classify(method: str, path: str, query: Mapping[str, str] | None = None) -> Access | None:
    """An HTTP request → the access RBAC checks, or None for a non-resource URL.

    ``GET /api/v1/namespaces/ns/persistentvolumeclaims?watch=true`` →
    ``Access("watch", "", "persistentvolumeclaims", None, "ns")``.
    """
    named = classify_named(method, path, query)
    return None if named is None else named[0]


def classify_named(
    method: str, path: str, query: Mapping[str, str] | None = None
) -> tuple[Access, str | None] | None:
    """As `classify`, with the object's name from the path (None for a collection)."""
    query = query or {}
    parts = [part for part in path.split("/") if part]
    if len(parts) >= 2 and parts[0] == "api":
        group, rest = "", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, rest = parts[1], parts[3:]
    else:
        return None
    watch_prefix = bool(rest) and rest[0] == "watch"  # the deprecated /watch/ paths
    if watch_prefix:
        rest = rest[1:]
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] not in _NAMESPACE_SUBRESOURCES:
        namespace, rest = rest[1], rest[2:]
    if not rest:
        return None  # discovery of a group/version: a non-resource URL for RBAC
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else None
    subresource = "/".join(rest[2:]) or None
    if resource == "namespaces" and name is not None:
        namespace = name  # a namespace's own requests are scoped to it (RequestInfoFactory)
    method = method.upper()
    if method in ("GET", "HEAD"):
        if watch_prefix or _truthy(query.get("watch")):
            verb = "watch"
        else:
            verb = "get" if name is not None else "list"
    elif method == "DELETE" and name is None:
        verb = "deletecollection"
    elif method in _WRITE_VERBS:
        verb = _WRITE_VERBS[method]
    else:
        verb = method.lower()
    return Access(verb, group, resource, subresource, namespace), name


class RequestLog:
    """Counts of the accesses and non-resource URLs seen; ``clear()`` to start afresh."""

    def __init__(self) -> None:
        self.accesses: collections.Counter[Access] = collections.Counter()
        self.non_resource: collections.Counter[tuple[str, str]] = collections.Counter()

    def record(self, method: str, path: str, query: Mapping[str, str] | None = None) -> None:
        access = classify(method, path, query)
        if access is None:
            self.non_resource[method.upper(), path] += 1
        else:
            self.accesses[access] += 1

    def count(self, *, verb: str | None = None, resource: str | None = None) -> int:
        """Requests seen with this verb on this resource (either may be left out)."""
        return sum(
            n for access, n in self.accesses.items()
            if verb in (None, access.verb) and resource in (None, access.resource)
        )  # fmt: skip

    def clear(self) -> None:
        self.accesses.clear()
        self.non_resource.clear()

    def __iter__(self) -> Iterator[Access]:
        return iter(sorted(self.accesses, key=lambda access: access.sort_key))

    def __len__(self) -> int:
        return len(self.accesses)
