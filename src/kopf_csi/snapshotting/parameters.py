"""The VolumeSnapshotClass parameters CreateSnapshot gets, and the class's secret templates.

Pure functions over plain dicts, with Go's error texts (pkg/utils/util.go):

- `driver_parameters`: the class parameters minus the reserved `csi.storage.k8s.io/` keys
  (the secret keys); any other reserved key is an error; `--extra-create-metadata` keys added;
- `secret_reference`: `GetSecretReference`; the templates of one secret (`Snapshotter`,
  `SnapshotterList`) resolved with `${volumesnapshotcontent.name}`, and, when the snapshot is
  known, `${volumesnapshot.name}` (name only) and `${volumesnapshot.namespace}`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from kopf_csi import names
from kopf_csi.provisioning import templates
from kopf_csi.provisioning.gofmt import go_quote

__all__ = [
    "GROUP_SNAPSHOTTER_SECRET",
    "LIST_SECRET",
    "SNAPSHOTTER_SECRET",
    "ParameterError",
    "SecretKind",
    "SecretRef",
    "driver_parameters",
    "group_driver_parameters",
    "secret_reference",
]

RESERVED_PREFIX = "csi.storage.k8s.io/"


class ParameterError(ValueError):
    """The class's parameters cannot be used; the message is Go's."""


@dataclasses.dataclass(frozen=True)
class SecretKind:
    name: str
    name_key: str
    namespace_key: str


SNAPSHOTTER_SECRET = SecretKind(
    "Snapshotter", names.PARAM_SNAPSHOTTER_SECRET_NAME, names.PARAM_SNAPSHOTTER_SECRET_NAMESPACE
)
LIST_SECRET = SecretKind(
    "SnapshotterList",
    names.PARAM_SNAPSHOTTER_LIST_SECRET_NAME,
    names.PARAM_SNAPSHOTTER_LIST_SECRET_NAMESPACE,
)
GROUP_SNAPSHOTTER_SECRET = SecretKind(
    "GroupSnapshotter",
    names.PARAM_GROUP_SNAPSHOTTER_SECRET_NAME,
    names.PARAM_GROUP_SNAPSHOTTER_SECRET_NAMESPACE,
)
_KNOWN_RESERVED = frozenset(
    {
        names.PARAM_SNAPSHOTTER_SECRET_NAME,
        names.PARAM_SNAPSHOTTER_SECRET_NAMESPACE,
        names.PARAM_SNAPSHOTTER_LIST_SECRET_NAME,
        names.PARAM_SNAPSHOTTER_LIST_SECRET_NAMESPACE,
        names.PARAM_GROUP_SNAPSHOTTER_SECRET_NAME,
        names.PARAM_GROUP_SNAPSHOTTER_SECRET_NAMESPACE,
    }
)


@dataclasses.dataclass(frozen=True)
class SecretRef:
    name: str
    namespace: str


def driver_parameters(
    parameters: Mapping[str, str] | None,
    *,
    content: Mapping[str, Any] | None = None,
    extra_create_metadata: bool = False,
) -> dict[str, str]:
    """`RemovePrefixedParameters`, then the `--extra-create-metadata` keys from the content."""
    result: dict[str, str] = {}
    for key, value in sorted((parameters or {}).items()):
        if key.startswith(RESERVED_PREFIX):
            if key not in _KNOWN_RESERVED:
                unknown = names.ERROR_SNAPSHOT_UNKNOWN_PARAMETER.format(key=key)
                raise ParameterError(names.ERROR_SNAPSHOT_PREFIXED_PARAMETERS.format(error=unknown))
            continue  # deprecated un-prefixed keys are kept, as upstream keeps them
        result[key] = value
    if extra_create_metadata and content is not None:
        ref = (content.get("spec") or {}).get("volumeSnapshotRef") or {}
        result[names.PARAM_VOLUME_SNAPSHOT_NAME] = str(ref.get("name") or "")
        result[names.PARAM_VOLUME_SNAPSHOT_NAMESPACE] = str(ref.get("namespace") or "")
        result[names.PARAM_VOLUME_SNAPSHOT_CONTENT_NAME] = str(content["metadata"]["name"])
    return result


def group_driver_parameters(
    parameters: Mapping[str, str] | None,
    *,
    content: Mapping[str, Any],
    extra_create_metadata: bool = False,
) -> dict[str, str]:
    """The same for CreateVolumeGroupSnapshot: the group's and its content's names as extras."""
    result = driver_parameters(parameters)
    if extra_create_metadata:
        ref = (content.get("spec") or {}).get("volumeGroupSnapshotRef") or {}
        result[names.PARAM_VOLUME_GROUP_SNAPSHOT_NAME] = str(ref.get("name") or "")
        result[names.PARAM_VOLUME_GROUP_SNAPSHOT_NAMESPACE] = str(ref.get("namespace") or "")
        result[names.PARAM_VOLUME_GROUP_SNAPSHOT_CONTENT_NAME] = str(content["metadata"]["name"])
    return result


def secret_reference(
    kind: SecretKind,
    parameters: Mapping[str, str] | None,
    *,
    content_name: str,
    snapshot: Mapping[str, Any] | None = None,
    token: str = "volumesnapshot",
) -> SecretRef | None:
    """The secret a class names for `kind`, resolved; None when it names none.

    `token` is the tokens' stem: `volumesnapshot` (`${volumesnapshotcontent.name}`,
    `${volumesnapshot.name}`, ...), or `volumegroupsnapshot` for a group class
    (`GetGroupSnapshotSecretReference`)."""
    try:
        name_template, namespace_template = _templates(kind, parameters or {})
    except ParameterError as exc:
        raise ParameterError(names.ERROR_SNAPSHOT_SECRET_TEMPLATES.format(error=exc)) from None
    if not name_template and not namespace_template:
        return None
    meta = (snapshot or {}).get("metadata") or {}
    namespace_params = {f"{token}content.name": content_name}
    name_params = {f"{token}content.name": content_name}
    if snapshot is not None:
        namespace_params[f"{token}.namespace"] = str(meta.get("namespace") or "")
        name_params[f"{token}.name"] = str(meta.get("name") or "")
        name_params[f"{token}.namespace"] = str(meta.get("namespace") or "")
    namespace = _resolve(namespace_template, namespace_params)
    if not templates.is_dns1123_label(namespace):
        raise ParameterError(_invalid(namespace_template, namespace, "namespace"))
    name = _resolve(name_template, name_params)
    if not templates.is_dns1123_subdomain(name):
        raise ParameterError(_invalid(name_template, name, "name"))
    return SecretRef(name=name, namespace=namespace)


def _templates(kind: SecretKind, parameters: Mapping[str, str]) -> tuple[str, str]:
    """`verifyAndGetSecretNameAndNamespaceTemplate`."""
    has_name, has_namespace = kind.name_key in parameters, kind.namespace_key in parameters
    if has_name != has_namespace:
        raise ParameterError(names.ERROR_SNAPSHOT_SECRET_HALF.format(kind=kind.name))
    if not has_name:
        return "", ""
    name, namespace = parameters[kind.name_key], parameters[kind.namespace_key]
    if not name or not namespace:
        raise ParameterError(names.ERROR_SNAPSHOT_SECRET_EMPTY.format(kind=kind.name))
    return name, namespace


def _resolve(template: str, params: Mapping[str, str]) -> str:
    try:
        return templates.resolve_template(template, params)
    except templates.TemplateError as exc:  # "invalid tokens: [...]", Go's text
        raise ParameterError(
            names.ERROR_SNAPSHOT_SECRET_RESOLVE.format(quoted=go_quote(template), error=exc)
        ) from None


def _invalid(template: str, resolved: str, what: str) -> str:
    if what == "namespace":
        if template != resolved:
            return names.ERROR_SNAPSHOT_NAMESPACE_RESOLVED_INVALID.format(
                quoted=go_quote(template), resolved=go_quote(resolved)
            )
        return names.ERROR_SNAPSHOT_NAMESPACE_INVALID.format(quoted=go_quote(template))
    if template != resolved:
        return names.ERROR_SNAPSHOT_NAME_RESOLVED_INVALID.format(
            quoted=go_quote(template), resolved=go_quote(resolved)
        )
    return names.ERROR_SNAPSHOT_NAME_INVALID.format(quoted=go_quote(template))
