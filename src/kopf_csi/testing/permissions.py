"""The RBAC the testing kit authorizes with (`kit_rbac`, on by default): what a cluster grants.

In a cluster the operator runs as its ServiceAccount, with the shipped RBAC
(`manifests/base/rbac.yaml`) and the roles generated from its modules' declarations
(`kopf-csi rbac -m MODULE`). A module that reads a kind neither grants works in an emulator that
allows everything, and meets a 403 only once deployed. The kit's emulated API authorizes the
operator's requests with exactly those objects, as that ServiceAccount, so the user's test
meets the 403 first, with the API server's own text naming the verb, the resource and the
namespace it lacks, and the declaration that would grant it. The test's own clients send no
credentials, and are `ADMIN` (cluster-admin), as kind's kubeconfig is.

The base RBAC ships inside the package (setup.py maps `manifests/base`'s `rbac.yaml` into
`kopf_csi.testing.manifests`); an editable install reads the repository's file.

What does not belong here: authorizing (`authorization`), and fixtures (`pytest_plugin`).
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterable, Sequence
from typing import Any

import yaml

from kopf_csi import modules, rbac
from kopf_csi.testing.authorization import ADMIN, Authorizer, Request, User, service_account

__all__ = ["ADMIN", "OPERATOR", "authorizer_for", "base_rbac", "cluster_arguments", "refusals"]

Body = dict[str, Any]
OPERATOR: User = service_account(rbac.NAMESPACE, rbac.ACCOUNT)
"""Who the operator is under `kit_rbac`: the Deployment's ServiceAccount, `kopf-csi/kopf-csi`."""
NAMESPACES = ("default", "kube-system")
"""The namespaces a kit's cluster starts with (and the operator's, under `kit_rbac`)."""
RBAC_FILE = "rbac.yaml"


def _base_file() -> pathlib.Path:
    """The packaged copy of `manifests/base/rbac.yaml`, else the repository's (an editable
    install: the package is the source tree)."""
    here = pathlib.Path(__file__).resolve().parent
    candidates = [here / "manifests" / RBAC_FILE]
    candidates += [base / "manifests" / "base" / RBAC_FILE for base in here.parents]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"the shipped RBAC ({RBAC_FILE}) is in neither of {candidates[:2]}")


def base_rbac() -> list[Body]:
    """The operator's shipped ServiceAccount, roles and bindings, as objects."""
    return [doc for doc in yaml.safe_load_all(_base_file().read_text()) if doc]


def authorizer_for(handler_modules: Sequence[str]) -> Authorizer:
    """An authorizer with the shipped RBAC and the roles the non-default modules declare,
    bound to the operator's ServiceAccount as `kopf-csi rbac` binds them. A request without
    credentials (the test's kubectl, explain, clients) is `ADMIN`'s."""
    own = _own(handler_modules)
    declared = modules.declared_rbac(own) if own else {}
    return Authorizer([*base_rbac(), *rbac.manifests(declared)], unauthenticated=ADMIN)


def cluster_arguments(*, kit_rbac: bool, handler_modules: Sequence[str]) -> dict[str, Any]:
    """`EmulatedCluster`'s namespaces and authorizer for the kit: with `kit_rbac`, the
    operator's namespace too, and an authorizer for the shipped and declared RBAC. For a test
    that builds its own cluster (other kinds): `EmulatedCluster(kinds=..., **these)`."""
    if not kit_rbac:
        return {"namespaces": NAMESPACES, "authorizer": None}
    return {
        "namespaces": (*NAMESPACES, rbac.NAMESPACE),
        "authorizer": authorizer_for(handler_modules),
    }


def _quoted(text: str) -> str:
    return f'"{text}"'  # as the docs write them


def _own(handler_modules: Sequence[str]) -> list[str]:
    return [name for name in handler_modules if name not in modules.DEFAULT_MODULES]


def declarations(refused: Iterable[tuple[User, Request]]) -> list[str]:
    """The `api.rbac` rules that would grant the operator's refused requests: a request in
    the operator's namespace as `namespaced`, any other as `cluster`, verbs gathered by
    resource. Non-resource URLs are not the modules' to declare (none is suggested)."""
    verbs: dict[tuple[str, str], list[str]] = {}
    for user, request in refused:
        access = request.access
        if user != OPERATOR or access is None:
            continue
        scope = "namespaced" if access.namespace == rbac.NAMESPACE else "cluster"
        resource = access.rbac_resource + (f".{access.group}" if access.group else "")
        verbs.setdefault((scope, resource), [])
        if access.verb not in verbs[scope, resource]:
            verbs[scope, resource].append(access.verb)
    return [
        f'api.rbac.{scope}({_quoted(resource)}, {", ".join(map(_quoted, found))}, why="...")'
        for (scope, resource), found in verbs.items()
    ]


def refusals(authorizer: Authorizer, handler_modules: Sequence[str]) -> str:
    """Why a test fails under `kit_rbac`: each 403 as the API server said it (the verb, the
    resource, its group and the namespace), and the declaration that would grant it."""
    lines = [f"  {denial}" for denial in dict.fromkeys(authorizer.denials)]
    suggested = declarations(authorizer.refused)
    how = (
        ["declare it at the top level of the module that asks (`kopf-csi rbac -m MODULE` prints"
         " the roles it makes):", "  api.rbac.declare(", *[f"      {rule}," for rule in suggested],
         "  )"]
        if suggested
        else ["declare what a module needs at its top level: api.rbac.declare(api.rbac.cluster("
              "...) or api.rbac.namespaced(...)); `kopf-csi rbac -m MODULE` prints the roles"]
    )  # fmt: skip
    return "\n".join(
        [
            "the API refused the operator's requests (403) under the shipped RBAC and the"
            " modules' declared rules (kit_rbac, the default; modules:"
            f" {', '.join(_own(handler_modules)) or 'the defaults'}):",
            *lines,
            *how,
        ]
    )
