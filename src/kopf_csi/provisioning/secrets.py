"""Secret references from StorageClass parameters, with their `${...}` templates resolved.

Each CSI call that may need credentials has a pair of parameters naming its secret
(`csi.storage.k8s.io/<call>-secret-name` and `-namespace`), falling back to the pair for all calls
(`csi.storage.k8s.io/secret-name`/`-namespace`). Their values may be templates: the namespace may
use `${pv.name}` and `${pvc.namespace}` (neither under the claim owner's control), the name may
also use `${pvc.name}` and `${pvc.annotations['KEY']}`. The results must be a DNS-1123 label
(namespace) and subdomain (name). This is external-provisioner's `getSecretReference`, with Go's
`os.Expand` semantics and its exact error texts. Reading the secret itself is the caller's I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, NamedTuple

from kopf_csi import names
from kopf_csi.provisioning import gofmt, templates
from kopf_csi.provisioning.errors import ProvisioningError
from kopf_csi.provisioning.states import ProvisioningState

__all__ = [
    "ALL_CALLS",
    "CONTROLLER_EXPAND",
    "CONTROLLER_MODIFY",
    "CONTROLLER_PUBLISH",
    "DEFAULT",
    "NODE_EXPAND",
    "NODE_PUBLISH",
    "NODE_STAGE",
    "PROVISIONER",
    "SecretKeys",
    "SecretRef",
    "SecretReferenceError",
    "SecretReferences",
    "deletion_secret_reference",
    "secret_reference",
    "secret_references",
]


class SecretReferenceError(ValueError):
    """A secret parameter or template is wrong; the message is the Go sidecar's."""


class SecretRef(NamedTuple):
    name: str
    namespace: str

    def as_dict(self) -> dict[str, str]:
        """The `SecretReference` object of a PV's `spec.csi.*SecretRef`."""
        return {"name": self.name, "namespace": self.namespace}


@dataclasses.dataclass(frozen=True)
class SecretKeys:
    """The parameter keys naming one call's secret (Go's `secretParamsMap`)."""

    call: str
    name_key: str
    namespace_key: str
    deprecated_name_key: str | None = None
    deprecated_namespace_key: str | None = None


DEFAULT = SecretKeys("Default", names.PARAM_SECRET_NAME, names.PARAM_SECRET_NAMESPACE)
PROVISIONER = SecretKeys(
    "Provisioner",
    names.PARAM_PROVISIONER_SECRET_NAME,
    names.PARAM_PROVISIONER_SECRET_NAMESPACE,
    names.PARAM_DEPRECATED_PROVISIONER_SECRET_NAME,
    names.PARAM_DEPRECATED_PROVISIONER_SECRET_NAMESPACE,
)
CONTROLLER_PUBLISH = SecretKeys(
    "ControllerPublish",
    names.PARAM_CONTROLLER_PUBLISH_SECRET_NAME,
    names.PARAM_CONTROLLER_PUBLISH_SECRET_NAMESPACE,
    names.PARAM_DEPRECATED_CONTROLLER_PUBLISH_SECRET_NAME,
    names.PARAM_DEPRECATED_CONTROLLER_PUBLISH_SECRET_NAMESPACE,
)
NODE_STAGE = SecretKeys(
    "NodeStage",
    names.PARAM_NODE_STAGE_SECRET_NAME,
    names.PARAM_NODE_STAGE_SECRET_NAMESPACE,
    names.PARAM_DEPRECATED_NODE_STAGE_SECRET_NAME,
    names.PARAM_DEPRECATED_NODE_STAGE_SECRET_NAMESPACE,
)
NODE_PUBLISH = SecretKeys(
    "NodePublish",
    names.PARAM_NODE_PUBLISH_SECRET_NAME,
    names.PARAM_NODE_PUBLISH_SECRET_NAMESPACE,
    names.PARAM_DEPRECATED_NODE_PUBLISH_SECRET_NAME,
    names.PARAM_DEPRECATED_NODE_PUBLISH_SECRET_NAMESPACE,
)
CONTROLLER_EXPAND = SecretKeys(
    "ControllerExpand",
    names.PARAM_CONTROLLER_EXPAND_SECRET_NAME,
    names.PARAM_CONTROLLER_EXPAND_SECRET_NAMESPACE,
)
NODE_EXPAND = SecretKeys(
    "NodeExpand", names.PARAM_NODE_EXPAND_SECRET_NAME, names.PARAM_NODE_EXPAND_SECRET_NAMESPACE
)
CONTROLLER_MODIFY = SecretKeys(
    "ControllerModify",
    names.PARAM_CONTROLLER_MODIFY_SECRET_NAME,
    names.PARAM_CONTROLLER_MODIFY_SECRET_NAMESPACE,
)
ALL_CALLS = (
    PROVISIONER,
    CONTROLLER_PUBLISH,
    NODE_STAGE,
    NODE_PUBLISH,
    CONTROLLER_EXPAND,
    NODE_EXPAND,
    CONTROLLER_MODIFY,
)


@dataclasses.dataclass(frozen=True)
class SecretReferences:
    """Every secret a provisioned PV may need; None where the StorageClass names none."""

    provisioner: SecretRef | None = None
    controller_publish: SecretRef | None = None
    node_stage: SecretRef | None = None
    node_publish: SecretRef | None = None
    controller_expand: SecretRef | None = None
    node_expand: SecretRef | None = None
    controller_modify: SecretRef | None = None


def _templates(keys: SecretKeys, parameters: Mapping[str, str]) -> tuple[str, str]:
    """Go's `verifyAndGetSecretNameAndNamespaceTemplate`: ("", "") when none is configured."""
    name_keys = [k for k in (keys.deprecated_name_key, keys.name_key) if k and k in parameters]
    ns_keys = [
        k for k in (keys.deprecated_namespace_key, keys.namespace_key) if k and k in parameters
    ]
    if len(name_keys) > 1 or len(ns_keys) > 1:
        raise SecretReferenceError(
            f'{keys.call} secrets specified in parameters with both "csi" and'
            f' "{names.PARAMETER_PREFIX}" keys'
        )
    if len(name_keys) != len(ns_keys):
        raise SecretReferenceError(
            f"either name and namespace for {keys.call} secrets specified, Both must be specified"
        )
    if not name_keys:
        return "", ""
    name, namespace = parameters[name_keys[0]], parameters[ns_keys[0]]
    if not name or not namespace:
        raise SecretReferenceError(
            f"{keys.call} secrets specified in parameters but value of either namespace or name"
            " is empty"
        )
    return name, namespace


def secret_reference(
    keys: SecretKeys,
    parameters: Mapping[str, str] | None,
    *,
    volume_name: str,
    claim: Mapping[str, Any],
) -> SecretRef | None:
    """The secret for one call, resolved against the PV name and the claim; None if none."""
    parameters = parameters or {}
    try:
        name_template, namespace_template = _templates(keys, parameters)
    except SecretReferenceError as exc:
        raise SecretReferenceError(
            f"failed to get name and namespace template from params: {exc}"
        ) from None
    if not name_template and not namespace_template:
        try:
            name_template, namespace_template = _templates(DEFAULT, parameters)
        except SecretReferenceError as exc:
            raise SecretReferenceError(
                f"failed to get default name and namespace template from params: {exc}"
            ) from None
    if not name_template and not namespace_template:
        return None

    metadata = claim.get("metadata", {})
    claim_namespace = metadata.get("namespace", "")
    namespace_params = {"pv.name": volume_name, "pvc.namespace": claim_namespace}
    namespace = _resolve(namespace_template, namespace_params)
    if not templates.is_dns1123_label(namespace):
        raise SecretReferenceError(_invalid(namespace_template, namespace, "namespace name"))

    name_params = {**namespace_params, "pvc.name": metadata.get("name", "")}
    for key, value in (metadata.get("annotations") or {}).items():
        name_params[f"pvc.annotations['{key}']"] = value
    name = _resolve(name_template, name_params)
    if not templates.is_dns1123_subdomain(name):
        raise SecretReferenceError(_invalid(name_template, name, "secret name"))
    return SecretRef(name=name, namespace=namespace)


def _resolve(template: str, params: Mapping[str, str]) -> str:
    try:
        return templates.resolve_template(template, params)
    except templates.TemplateError as exc:
        raise SecretReferenceError(
            f"error resolving value {gofmt.go_quote(template)}: {exc}"
        ) from None


def _invalid(template: str, resolved: str, what: str) -> str:
    if template != resolved:
        quoted = gofmt.go_quote(resolved)
        return f"{gofmt.go_quote(template)} resolved to {quoted} which is not a valid {what}"
    return f"{gofmt.go_quote(template)} is not a valid {what}"


def secret_references(
    parameters: Mapping[str, str] | None,
    *,
    volume_name: str,
    claim: Mapping[str, Any],
) -> SecretReferences:
    """All the secrets of a new volume; a bad parameter or template leaves the claim unchanged."""
    try:
        refs = [
            secret_reference(keys, parameters, volume_name=volume_name, claim=claim)
            for keys in ALL_CALLS
        ]
    except SecretReferenceError as exc:
        raise ProvisioningError(str(exc), state=ProvisioningState.NO_CHANGE) from None
    return SecretReferences(*refs)


def deletion_secret_reference(
    volume: Mapping[str, Any], *, storage_class: Mapping[str, Any] | None
) -> SecretRef | None:
    """The secret for DeleteVolume (external-provisioner's `handleSecretsForDeletion`).

    The PV's deletion-secret annotations win: both set means that secret, anything else there
    means none. Without the annotations (PVs from old versions), the StorageClass is read again,
    with only the claim's name and namespace known (from `claimRef`). A missing StorageClass or
    claimRef means no secret; a broken template is an error.
    """
    metadata = volume.get("metadata", {})
    annotations = metadata.get("annotations") or {}
    if names.ANN_DELETION_SECRET_NAME in annotations and (
        names.ANN_DELETION_SECRET_NAMESPACE in annotations
    ):
        name = annotations[names.ANN_DELETION_SECRET_NAME]
        namespace = annotations[names.ANN_DELETION_SECRET_NAMESPACE]
        return SecretRef(name, namespace) if name and namespace else None
    claim_ref = volume.get("spec", {}).get("claimRef")
    if storage_class is None or claim_ref is None:
        return None
    stub = {
        "metadata": {"name": claim_ref.get("name", ""), "namespace": claim_ref.get("namespace", "")}
    }
    try:
        return secret_reference(
            PROVISIONER,
            storage_class.get("parameters"),
            volume_name=metadata.get("name", ""),
            claim=stub,
        )
    except SecretReferenceError as exc:
        raise SecretReferenceError(
            f"failed to get secretreference for volume {metadata.get('name', '')}: {exc}"
        ) from None
