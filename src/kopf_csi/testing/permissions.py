"""The RBAC the testing kit authorizes with when asked (`kit_rbac`): what a cluster grants.

In a cluster the operator runs as its ServiceAccount, with the shipped RBAC
(`manifests/base/rbac.yaml`) and the roles generated from its modules' declarations
(`kopf-csi rbac -m MODULE`). A module that reads a kind neither grants works in an emulator that
allows everything, and meets a 403 only once deployed. With `kit_rbac`, the kit's emulated API
authorizes the operator's requests with exactly those objects, as that ServiceAccount, so the
user's test meets the 403 first, with the API server's own text naming the verb, the resource
and the namespace it lacks.

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
from kopf_csi.testing.authorization import Authorizer, User, service_account

__all__ = ["OPERATOR", "authorizer_for", "base_rbac", "refusals"]

Body = dict[str, Any]
OPERATOR: User = service_account(rbac.NAMESPACE, rbac.ACCOUNT)
"""Who the operator is under `kit_rbac`: the Deployment's ServiceAccount, `kopf-csi/kopf-csi`."""
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
    bound to the operator's ServiceAccount as `kopf-csi rbac` binds them."""
    own = [name for name in handler_modules if name not in modules.DEFAULT_MODULES]
    declared = modules.declared_rbac(own) if own else {}
    return Authorizer([*base_rbac(), *rbac.manifests(declared)])


def refusals(denials: Iterable[str], handler_modules: Sequence[str]) -> str:
    """Why a test fails under `kit_rbac`: each 403 as the API server said it, and the way out."""
    own = [name for name in handler_modules if name not in modules.DEFAULT_MODULES]
    lines = [f"  {denial}" for denial in dict.fromkeys(denials)]
    return "\n".join(
        [
            "the API refused the operator's requests (403) under the shipped RBAC and the"
            f" modules' declared rules (kit_rbac; modules: {', '.join(own) or 'the defaults'}):",
            *lines,
            "declare what a module needs at its top level: api.rbac.declare(api.rbac.cluster("
            "...) or api.rbac.namespaced(...)); `kopf-csi rbac -m MODULE` prints the roles",
        ]
    )
