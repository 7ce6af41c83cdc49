"""RBAC for the emulated API server: who sent a request, and whether the roles allow it.

Authentication: a bearer token from ``login()`` names its user; a request without a token is
``system:anonymous`` in ``system:unauthenticated`` (the API server's default), or the
``unauthenticated`` user given (the testing kit's: ``ADMIN``, as the API server's old insecure
port served plain HTTP unauthenticated as an admin; kubectl sends no token over plain HTTP); an
unknown token is answered 401. Authorization follows the API server's RBAC authorizer:

- ClusterRoleBindings are consulted first, then the RoleBindings of the request's namespace;
  the first rule that allows the request decides, and is credited in ``uses``.
- A rule allows a resource request when its ``verbs``, ``apiGroups`` and ``resources`` hold
  the request's or ``*``; ``resources`` name ``plural``, ``plural/subresource`` or
  ``*/subresource``; ``resourceNames``, when given, must hold the object's name (so they never
  allow a list, a watch or a create).
- A non-resource request (``/api``, ``/version``) has the lowercased HTTP method as its verb and
  is allowed by ``nonResourceURLs``: the exact path, ``*``, or a prefix ending in ``*``. Only
  cluster-wide bindings can allow it.
- Subjects: a User by name, a Group the user is in, a ServiceAccount by name and namespace (the
  binding's own if it names none). A binding to a role that does not exist grants nothing.
- The bootstrap roles every cluster grants to authenticated users are always there
  (``system:discovery``, ``system:public-info-viewer``, ``system:basic-user``), and
  ``cluster-admin`` for the group ``system:masters`` (``ADMIN``, kind's and kubeadm's admin).

A refusal is the API server's 403 ``Status`` (reason Forbidden, the message naming the user, the
verb, ``resource[/subresource]``, the API group and the scope; ``details`` with the group, the
resource as ``kind`` and the name), and is kept in ``denials`` (and who asked what, in
``refused``) so that a test fails on it even when the client swallowed the error.

What does not belong here: serving (``emulator``), and the classification of a request into
RBAC's terms (``requestlog``).
"""

from __future__ import annotations

import collections
import dataclasses
import json
import secrets
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from kopf_csi.testing.apimachinery import StatusError
from kopf_csi.testing.requestlog import Access, classify_named

__all__ = [
    "ADMIN",
    "ANONYMOUS",
    "AUTHENTICATED",
    "Authorizer",
    "Grant",
    "Request",
    "Rule",
    "User",
    "bootstrap_objects",
    "forbidden",
    "grants",
    "service_account",
]

Body = dict[str, Any]
AUTHENTICATED = "system:authenticated"
UNAUTHENTICATED = "system:unauthenticated"
MASTERS = "system:masters"


@dataclasses.dataclass(frozen=True)
class User:
    name: str
    groups: frozenset[str] = frozenset()


ANONYMOUS = User("system:anonymous", frozenset({UNAUTHENTICATED}))
ADMIN = User("kubernetes-admin", frozenset({MASTERS, AUTHENTICATED}))
"""The user of kind's and kubeadm's admin kubeconfig: `cluster-admin`, through its group."""


def service_account(namespace: str, name: str) -> User:
    """The user a ServiceAccount's token authenticates as, with the groups the server adds."""
    return User(
        f"system:serviceaccount:{namespace}:{name}",
        frozenset({"system:serviceaccounts", f"system:serviceaccounts:{namespace}", AUTHENTICATED}),
    )


@dataclasses.dataclass(frozen=True)
class Request:
    """One HTTP request as the authorizer sees it; ``access`` is None for a non-resource URL."""

    verb: str
    path: str
    access: Access | None = None
    name: str | None = None

    @classmethod
    def of(cls, method: str, path: str, query: Mapping[str, str] | None = None) -> Request:
        named = classify_named(method, path, query)
        if named is None:
            return cls(method.lower(), path)
        access, name = named
        return cls(access.verb, path, access, name)


def _among(value: str, allowed: frozenset[str]) -> bool:
    return value in allowed or "*" in allowed


@dataclasses.dataclass(frozen=True)
class Rule:
    """One PolicyRule of a role."""

    verbs: frozenset[str]
    groups: frozenset[str] = frozenset()
    resources: frozenset[str] = frozenset()
    names: frozenset[str] = frozenset()
    urls: frozenset[str] = frozenset()

    @classmethod
    def parse(cls, rule: Mapping[str, Any]) -> Rule:
        def field(key: str) -> frozenset[str]:
            return frozenset(rule.get(key) or ())

        return cls(
            field("verbs"),
            field("apiGroups"),
            field("resources"),
            field("resourceNames"),
            field("nonResourceURLs"),
        )

    def allows(self, request: Request) -> bool:
        if not _among(request.verb, self.verbs):
            return False
        access = request.access
        if access is None:
            return any(_url_matches(url, request.path) for url in self.urls)
        return (
            _among(access.group, self.groups)
            and any(_resource_matches(resource, access) for resource in self.resources)
            and (not self.names or request.name in self.names)
        )

    def permissions(self) -> Iterator[tuple[str, str, str]]:
        """Each (group, resource, verb) the rule names, expanded, as written."""
        for group in sorted(self.groups):
            for resource in sorted(self.resources):
                for verb in sorted(self.verbs):
                    yield group, resource, verb


def _url_matches(url: str, path: str) -> bool:
    return url in ("*", path) or (url.endswith("*") and path.startswith(url[:-1]))


def _resource_matches(resource: str, access: Access) -> bool:
    if resource in ("*", access.rbac_resource):
        return True
    return access.subresource is not None and resource == f"*/{access.subresource}"


@dataclasses.dataclass(frozen=True)
class Grant:
    """One binding: its role's rules for its subjects, cluster-wide or in one namespace."""

    binding: str  # "ClusterRoleBinding/name" or "RoleBinding/namespace/name", for messages
    role: str  # "ClusterRole/name" or "Role/namespace/name"
    namespace: str | None
    subjects: tuple[Mapping[str, Any], ...]
    rules: tuple[Rule, ...]

    def binds(self, user: User) -> bool:
        return any(self._names(subject, user) for subject in self.subjects)

    def _names(self, subject: Mapping[str, Any], user: User) -> bool:
        kind, name = subject.get("kind"), subject.get("name")
        if kind == "User":
            return name == user.name
        if kind == "Group":
            return name in user.groups
        if kind == "ServiceAccount":
            namespace = subject.get("namespace") or self.namespace or ""
            return user.name == f"system:serviceaccount:{namespace}:{name}"
        return False

    def rule_for(self, request: Request) -> Rule | None:
        """The first rule allowing the request, if this binding applies where it is made."""
        where = request.access.namespace if request.access is not None else None
        if self.namespace is not None and where != self.namespace:
            return None
        return next((rule for rule in self.rules if rule.allows(request)), None)


def grants(objects: Iterable[Mapping[str, Any]]) -> list[Grant]:
    """The bindings among these objects, resolved against the roles among them."""
    objects = list(objects)
    roles = {
        (obj["kind"], obj["metadata"].get("namespace"), obj["metadata"]["name"]): obj
        for obj in objects
        if obj.get("kind") in ("ClusterRole", "Role")
    }
    found: list[Grant] = []
    for binding in objects:
        if binding.get("kind") not in ("ClusterRoleBinding", "RoleBinding"):
            continue
        meta, ref = binding["metadata"], binding["roleRef"]
        where = meta.get("namespace") if binding["kind"] == "RoleBinding" else None
        # A ClusterRoleBinding can only refer to a ClusterRole; a RoleBinding to either.
        key = (ref["kind"], where if ref["kind"] == "Role" else None, ref["name"])
        role = roles.get(key) if where is not None or ref["kind"] == "ClusterRole" else None
        rules = tuple(Rule.parse(rule) for rule in (role or {}).get("rules") or ())
        found.append(
            Grant(
                binding="/".join(part for part in (binding["kind"], where, meta["name"]) if part),
                role="/".join(part for part in key if part),
                namespace=where,
                subjects=tuple(binding.get("subjects") or ()),
                rules=rules,
            )
        )
    return found


_DISCOVERY_URLS = ["/api", "/api/*", "/apis", "/apis/*", "/openapi", "/openapi/*"]
_PUBLIC_URLS = ["/healthz", "/livez", "/readyz", "/version", "/version/"]
_BOOTSTRAP: tuple[tuple[str, tuple[str, ...], list[Body]], ...] = (
    ("system:discovery", (AUTHENTICATED,),
     [{"nonResourceURLs": _DISCOVERY_URLS + _PUBLIC_URLS, "verbs": ["get"]}]),
    ("system:public-info-viewer", (AUTHENTICATED, UNAUTHENTICATED),
     [{"nonResourceURLs": _PUBLIC_URLS, "verbs": ["get"]}]),
    ("system:basic-user", (AUTHENTICATED,),
     [{"apiGroups": ["authorization.k8s.io"], "verbs": ["create"],
       "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"]},
      {"apiGroups": ["authentication.k8s.io"], "verbs": ["create"],
       "resources": ["selfsubjectreviews"]}]),
    ("cluster-admin", (MASTERS,),
     [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
      {"nonResourceURLs": ["*"], "verbs": ["*"]}]),
)  # fmt: skip


def bootstrap_objects() -> list[Body]:
    """The default ClusterRoles and ClusterRoleBindings every cluster has for discovery."""
    objects: list[Body] = []
    for name, groups, rules in _BOOTSTRAP:
        objects.append({"kind": "ClusterRole", "metadata": {"name": name}, "rules": rules})
        objects.append(
            {"kind": "ClusterRoleBinding", "metadata": {"name": name},
             "roleRef": {"kind": "ClusterRole", "name": name},
             "subjects": [{"kind": "Group", "name": group} for group in groups]}
        )  # fmt: skip
    return objects


def _quoted(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)  # as Go's %q prints a plain string


def _status(code: int, reason: str, message: str, details: Body | None = None) -> Body:
    return StatusError(code, message, reason=reason, details=details).status()


def forbidden(user: User, request: Request) -> Body:
    """The API server's 403 body for this request."""
    access = request.access
    if access is None:
        reason = f"User {_quoted(user.name)} cannot {request.verb} path {_quoted(request.path)}"
        return _status(403, "Forbidden", f"forbidden: {reason}", {})
    scope = (
        f"in the namespace {_quoted(access.namespace)}"
        if access.namespace
        else "at the cluster scope"
    )
    reason = (
        f"User {_quoted(user.name)} cannot {access.verb} resource "
        f"{_quoted(access.rbac_resource)} in API group {_quoted(access.group)} {scope}"
    )
    qualified = f"{access.resource}.{access.group}" if access.group else access.resource
    subject = f"{qualified} {_quoted(request.name)}" if request.name else qualified
    details = {"group": access.group, "kind": access.resource, "name": request.name or ""}
    return _status(
        403,
        "Forbidden",
        f"{subject} is forbidden: {reason}",
        {key: value for key, value in details.items() if value},  # omitempty
    )


UNAUTHORIZED = _status(401, "Unauthorized", "Unauthorized")


class Authorizer:
    """Authenticates and authorizes the emulator's HTTP requests against RBAC objects."""

    def __init__(
        self, objects: Iterable[Mapping[str, Any]] = (), *, unauthenticated: User = ANONYMOUS
    ) -> None:
        self.grants = grants(objects)  # the given objects' bindings; the bootstrap ones apart
        self.unauthenticated = unauthenticated  # who a request without credentials is
        self._bootstrap = grants(bootstrap_objects())
        self._tokens: dict[str, User] = {}
        self.uses: collections.Counter[tuple[str, Access | str]] = collections.Counter()
        """Allowed requests per deciding binding: its label, and the access (or the path)."""
        self.denials: list[str] = []  # the messages of every 403 answered
        self.refused: list[tuple[User, Request]] = []  # and who asked for what, in order

    def login(self, user: User) -> str:
        """A bearer token for `user` (put it in a kubeconfig)."""
        token = secrets.token_urlsafe(24)
        self._tokens[token] = user
        return token

    def authenticate(self, authorization: str | None) -> User | None:
        """The user behind an ``Authorization`` header; None for a token nobody issued."""
        if not authorization:
            return self.unauthenticated
        scheme, _, token = authorization.partition(" ")
        return self._tokens.get(token.strip()) if scheme.lower() == "bearer" else None

    def decide(self, user: User, request: Request) -> Grant | None:
        """The binding that allows the request (cluster-wide ones first), or None."""
        where = request.access.namespace if request.access is not None else None
        candidates = [*self._bootstrap, *self.grants]
        ordered = [g for g in candidates if g.namespace is None] + [
            g for g in candidates if where is not None and g.namespace == where
        ]
        for grant in ordered:
            if grant.binds(user) and grant.rule_for(request) is not None:
                return grant
        return None

    def check(
        self,
        method: str,
        path: str,
        query: Mapping[str, str] | None,
        authorization: str | None,
    ) -> Body | None:
        """None if the request may go on; else the Status body to answer (its ``code``)."""
        user = self.authenticate(authorization)
        if user is None:
            return dict(UNAUTHORIZED)
        request = Request.of(method, path, query)
        grant = self.decide(user, request)
        if grant is None:
            refusal = forbidden(user, request)
            self.denials.append(refusal["message"])
            self.refused.append((user, request))
            return refusal
        self.uses[grant.binding, request.access or request.path] += 1
        return None
