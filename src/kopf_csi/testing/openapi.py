"""The emulated API server's OpenAPI v3 documents, and the field validation they promise.

``kubectl apply`` (``--validate=strict``, its default) reads ``/openapi/v3`` and the document of
the object's group version. When the PATCH operation of the object's kind takes the
``fieldValidation`` query parameter, as on every real server since v1.27, kubectl leaves the
validation to the server and sends ``fieldValidation=Strict``; the server then refuses unknown
fields with a 400 (``strict decoding error: unknown field "spec.foo"``). Without these
documents kubectl stops with ``failed to download openapi``.

How far it goes: every served kind has a schema, generated from ``FIELDS`` below (one small
declaration per kind: its fields to the depth users and controllers write them, statuses
included; deeper parts, such as a Pod's or a Node's spec and status, or PV sources other than
``csi``, are free-form objects). Unknown fields are found wherever a schema lists its
properties, in the object a create or an update proposes and in a patch's result, as the real
server finds them, and are dropped before anything is stored (``prune``): ``Strict`` refuses
instead, ``Warn`` (also the real server's default, when the parameter is absent) answers with
``Warning`` headers, ``Ignore`` says nothing. The snapshot kinds are pruned as their CRDs'
structural schemas prune them (free-form only where a CRD preserves unknown fields; tests
compare them with manifests/crds), and every kind's metadata to ObjectMeta's fields. A key
given twice in a create's or an update's body (``decode``) is named as well (its last value is
kept). What is left out: values are not type-checked, free-form parts keep anything, a patch's
own duplicate keys are not looked for, and a built-in kind's 400 names the duplicates before
the unknown fields, where the real one names them all in the document's order (a CRD's has
this order). The schemas carry no descriptions (``kubectl explain`` shows the fields and
their types only).
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Iterable, Mapping
from typing import Any

from kopf_csi.testing.discovery import KUBERNETES_VERSION, Served

__all__ = [
    "FIELDS",
    "decode",
    "document",
    "index",
    "prune",
    "served_document",
    "strict_message",
]

Spec = Any
"""A field's declaration: "string", "integer", "boolean", a [item] list, a {name: spec} object,
MAP (a string map), ANY (a free-form object), QUANTITY (a number or a string)."""
MAP, ANY, QUANTITY = "map", "any", "quantity"

_REF = {"apiGroup": "string", "kind": "string", "name": "string"}
_OBJECT_REF = {**{k: "string" for k in ("apiVersion", "kind", "name", "namespace", "uid")},
               "resourceVersion": "string", "fieldPath": "string"}  # fmt: skip
_PV_SOURCES = (
    "awsElasticBlockStore", "azureDisk", "azureFile", "cephfs", "cinder", "csi", "fc",
    "flexVolume", "flocker", "gcePersistentDisk", "glusterfs", "hostPath", "iscsi", "local",
    "nfs", "photonPersistentDisk", "portworxVolume", "quobyte", "rbd", "scaleIO", "storageos",
    "vsphereVolume",
)  # fmt: skip
_CLASS = {"driver": "string", "parameters": MAP, "deletionPolicy": "string"}
_REQUIREMENT = {"key": "string", "operator": "string", "values": ["string"]}
_SELECTOR = {"matchLabels": MAP, "matchExpressions": [_REQUIREMENT]}
_SECRET_REF = {"name": "string", "namespace": "string"}
_SECRET_REFS = ("controllerPublishSecretRef", "nodeStageSecretRef", "nodePublishSecretRef",
                "controllerExpandSecretRef", "nodeExpandSecretRef")  # fmt: skip
_CONDITION = dict.fromkeys(
    ("type", "status", "lastProbeTime", "lastTransitionTime", "reason", "message"), "string"
)
_VOLUME_ERROR = {"time": "string", "message": "string", "errorCode": "integer"}
_SNAPSHOT_ERROR = {"message": "string", "time": "string"}
_SERIES = {"count": "integer", "lastObservedTime": "string"}

FIELDS: dict[tuple[str, str], dict[str, Spec]] = {
    ("", "PersistentVolumeClaim"): {
        "spec": {
            "accessModes": ["string"],
            "selector": _SELECTOR,
            "resources": {"limits": {"*": QUANTITY}, "requests": {"*": QUANTITY}},
            "volumeName": "string",
            "storageClassName": "string",
            "volumeMode": "string",
            "dataSource": _REF,
            "dataSourceRef": {**_REF, "namespace": "string"},
            "volumeAttributesClassName": "string",
        },
        "status": {
            "phase": "string",
            "accessModes": ["string"],
            "capacity": {"*": QUANTITY},
            "conditions": [_CONDITION],
            "allocatedResources": {"*": QUANTITY},
            "allocatedResourceStatuses": MAP,
            "currentVolumeAttributesClassName": "string",
            "modifyVolumeStatus": {"targetVolumeAttributesClassName": "string", "status": "string"},
        },
    },
    ("", "PersistentVolume"): {
        "spec": {
            "capacity": {"*": QUANTITY},
            "accessModes": ["string"],
            "claimRef": _OBJECT_REF,
            "persistentVolumeReclaimPolicy": "string",
            "storageClassName": "string",
            "mountOptions": ["string"],
            "volumeMode": "string",
            "nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [_REQUIREMENT], "matchFields": [_REQUIREMENT]}
                    ]
                }
            },
            "volumeAttributesClassName": "string",
            **dict.fromkeys(_PV_SOURCES, ANY),
            "csi": {
                **dict.fromkeys(("driver", "volumeHandle", "fsType"), "string"),
                "readOnly": "boolean",
                "volumeAttributes": MAP,
                **dict.fromkeys(_SECRET_REFS, _SECRET_REF),
            },
        },
        "status": dict.fromkeys(
            ("phase", "message", "reason", "lastPhaseTransitionTime"), "string"
        ),
    },
    ("", "Pod"): {"spec": ANY, "status": ANY},
    ("", "Node"): {"spec": ANY, "status": ANY},
    ("", "Namespace"): {"spec": ANY, "status": ANY},
    ("", "Secret"): {"data": MAP, "stringData": MAP, "type": "string", "immutable": "boolean"},
    ("", "ConfigMap"): {"data": MAP, "binaryData": MAP, "immutable": "boolean"},
    ("", "Event"): {
        **dict.fromkeys(("reason", "message", "type", "action", "reportingComponent"), "string"),
        **dict.fromkeys(("reportingInstance", "firstTimestamp", "lastTimestamp"), "string"),
        "eventTime": "string",
        "count": "integer",
        "involvedObject": _OBJECT_REF,
        "related": _OBJECT_REF,
        "source": {"component": "string", "host": "string"},
        "series": _SERIES,
    },
    ("storage.k8s.io", "StorageClass"): {
        "provisioner": "string",
        "parameters": MAP,
        "reclaimPolicy": "string",
        "mountOptions": ["string"],
        "allowVolumeExpansion": "boolean",
        "volumeBindingMode": "string",
        "allowedTopologies": [{"matchLabelExpressions": [{"key": "string", "values": ["string"]}]}],
    },
    ("storage.k8s.io", "VolumeAttachment"): {
        "spec": {
            "attacher": "string",
            "source": {"persistentVolumeName": "string", "inlineVolumeSpec": ANY},
            "nodeName": "string",
        },
        "status": {
            "attached": "boolean",
            "attachmentMetadata": MAP,
            "attachError": _VOLUME_ERROR,
            "detachError": _VOLUME_ERROR,
        },
    },
    ("storage.k8s.io", "CSINode"): {
        "spec": {
            "drivers": [
                {
                    "name": "string",
                    "nodeID": "string",
                    "topologyKeys": ["string"],
                    "allocatable": {"count": "integer"},
                }
            ]
        }
    },
    ("storage.k8s.io", "CSIDriver"): {
        "spec": {
            **dict.fromkeys(("attachRequired", "podInfoOnMount", "storageCapacity"), "boolean"),
            **dict.fromkeys(("requiresRepublish", "seLinuxMount"), "boolean"),
            "serviceAccountTokenInSecrets": "boolean",
            "volumeLifecycleModes": ["string"],
            "fsGroupPolicy": "string",
            "tokenRequests": [{"audience": "string", "expirationSeconds": "integer"}],
            "nodeAllocatableUpdatePeriodSeconds": "integer",
        }
    },
    ("storage.k8s.io", "CSIStorageCapacity"): {
        "storageClassName": "string",
        "capacity": QUANTITY,
        "maximumVolumeSize": QUANTITY,
        "nodeTopology": _SELECTOR,
    },
    ("storage.k8s.io", "VolumeAttributesClass"): {"driverName": "string", "parameters": MAP},
    ("coordination.k8s.io", "Lease"): {
        "spec": {
            **dict.fromkeys(("holderIdentity", "acquireTime", "renewTime"), "string"),
            **dict.fromkeys(("strategy", "preferredHolder"), "string"),
            **dict.fromkeys(("leaseDurationSeconds", "leaseTransitions"), "integer"),
        }
    },
    ("events.k8s.io", "Event"): {
        **dict.fromkeys(("reason", "note", "type", "action", "reportingController"), "string"),
        **dict.fromkeys(("reportingInstance", "eventTime"), "string"),
        "regarding": _OBJECT_REF,
        "related": _OBJECT_REF,
        "series": _SERIES,
        "deprecatedSource": {"component": "string", "host": "string"},
        **dict.fromkeys(("deprecatedFirstTimestamp", "deprecatedLastTimestamp"), "string"),
        "deprecatedCount": "integer",
    },
    ("apiextensions.k8s.io", "CustomResourceDefinition"): {"spec": ANY, "status": ANY},
    # manifests/crds: the same properties (tests/emulator/test_openapi.py compares them).
    ("snapshot.storage.k8s.io", "VolumeSnapshot"): {
        "spec": {
            "source": {
                "persistentVolumeClaimName": "string",
                "volumeSnapshotContentName": "string",
            },
            "volumeSnapshotClassName": "string",
        },
        "status": {
            "boundVolumeSnapshotContentName": "string",
            "creationTime": "string",
            "readyToUse": "boolean",
            "restoreSize": QUANTITY,
            "error": _SNAPSHOT_ERROR,
            "volumeGroupSnapshotName": "string",
        },
    },
    ("snapshot.storage.k8s.io", "VolumeSnapshotContent"): {
        "spec": {
            "deletionPolicy": "string",
            "driver": "string",
            "source": {"volumeHandle": "string", "snapshotHandle": "string"},
            "sourceVolumeMode": "string",
            "volumeSnapshotClassName": "string",
            "volumeSnapshotRef": _OBJECT_REF,
        },
        "status": {
            **dict.fromkeys(("creationTime", "restoreSize"), "integer"),
            "readyToUse": "boolean",
            **dict.fromkeys(("snapshotHandle", "volumeGroupSnapshotHandle"), "string"),
            "error": _SNAPSHOT_ERROR,
        },
    },
    ("snapshot.storage.k8s.io", "VolumeSnapshotClass"): _CLASS,
    ("groupsnapshot.storage.k8s.io", "VolumeGroupSnapshot"): {
        "spec": {
            "source": {"selector": _SELECTOR, "volumeGroupSnapshotContentName": "string"},
            "volumeGroupSnapshotClassName": "string",
        },
        "status": {
            **dict.fromkeys(("boundVolumeGroupSnapshotContentName", "creationTime"), "string"),
            "readyToUse": "boolean",
            "error": _SNAPSHOT_ERROR,
        },
    },
    ("groupsnapshot.storage.k8s.io", "VolumeGroupSnapshotContent"): {
        "spec": {
            "deletionPolicy": "string",
            "driver": "string",
            "source": {
                "volumeHandles": ["string"],
                "groupSnapshotHandles": {
                    "volumeGroupSnapshotHandle": "string",
                    "volumeSnapshotHandles": ["string"],
                },
            },
            "volumeGroupSnapshotClassName": "string",
            "volumeGroupSnapshotRef": _OBJECT_REF,
        },
        "status": {
            **dict.fromkeys(("volumeGroupSnapshotHandle", "creationTime"), "string"),
            "readyToUse": "boolean",
            "error": _SNAPSHOT_ERROR,
            "volumeSnapshotInfoList": [
                {
                    **dict.fromkeys(("volumeHandle", "snapshotHandle"), "string"),
                    **dict.fromkeys(("creationTime", "restoreSize"), "integer"),
                    "readyToUse": "boolean",
                }
            ],
        },
    },
    ("groupsnapshot.storage.k8s.io", "VolumeGroupSnapshotClass"): _CLASS,
}
"""Each kind's fields besides apiVersion, kind and metadata, by (group, Kind)."""

_METADATA: dict[str, Spec] = {
    **dict.fromkeys(("name", "generateName", "namespace", "uid", "resourceVersion"), "string"),
    **dict.fromkeys(("creationTimestamp", "deletionTimestamp", "selfLink"), "string"),
    "generation": "integer",
    "deletionGracePeriodSeconds": "integer",
    "labels": MAP,
    "annotations": MAP,
    "finalizers": ["string"],
    "ownerReferences": [
        {
            **dict.fromkeys(("apiVersion", "kind", "name", "uid"), "string"),
            **dict.fromkeys(("controller", "blockOwnerDeletion"), "boolean"),
        }
    ],
    "managedFields": [ANY],
}
_META_SCHEMA = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"


def _fields(kind: Served) -> dict[str, Spec]:
    # A kind served only for a test (a made-up CRD) takes anything, as a CRD with
    # x-kubernetes-preserve-unknown-fields.
    fields = FIELDS.get((kind.group, kind.kind), {"spec": ANY, "status": ANY})
    return {"apiVersion": "string", "kind": "string", "metadata": _METADATA, **fields}


# --- Validation and pruning -------------------------------------------------------------------


def prune(kind: Served, obj: Any) -> tuple[Any, list[str]]:
    """The object as the real server stores it, without the fields no schema declares, and
    their paths (``spec.foo``) in the object's order, for Strict's 400 and Warn's headers.

    A built-in kind keeps only its schema's fields (strict decoding into the Go type); a CRD's
    object is pruned by its structural schema except under x-kubernetes-preserve-unknown-fields
    (ANY here), and its metadata to ObjectMeta's fields. Copy on write: the parts kept are the
    given ones, so a patch's result sharing parts with the stored object is never changed in
    place. A key starting with ``$`` (a strategic-merge directive) is dropped without being
    named: a strategic merge consumes its directives, and one that a JSON merge patch left in
    place, which a real server would name too, is not worth a 400 here.
    """
    found: list[str] = []
    return _prune(_fields(kind), obj, "", found), found


def _prune(spec: Spec, value: Any, path: str, found: list[str]) -> Any:
    if isinstance(spec, list) and isinstance(value, list):
        items = [_prune(spec[0], item, f"{path}[{i}]", found) for i, item in enumerate(value)]
        return value if all(new is old for new, old in zip(items, value, strict=True)) else items
    if not (isinstance(spec, dict) and isinstance(value, dict)):
        return value
    kept: dict[str, Any] | None = None  # a copy, made at the first change
    for index, (key, item) in enumerate(value.items()):
        inner = spec.get(key, spec.get("*"))
        new = item
        if inner is None:
            if not key.startswith("$"):
                found.append(f"{path}.{key}" if path else key)
        elif not isinstance(inner, str):  # a leaf (str) has nothing to prune below it
            new = _prune(inner, item, f"{path}.{key}" if path else key, found)
        if kept is None and (inner is None or new is not item):
            kept = dict(itertools.islice(value.items(), index))
        if kept is not None and inner is not None:
            kept[key] = new
    return value if kept is None else kept


def decode(raw: bytes) -> tuple[Any, list[str]]:
    """A JSON body, and the paths of the keys it gives more than once (the last value kept, as
    in the real server's decoder), in the object's order."""
    repeated: dict[int, list[str]] = {}  # id of an object -> its keys given twice

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        obj = dict(items)
        if len(obj) < len(items):
            seen: set[str] = set()
            twice = repeated[id(obj)] = []
            for key, _ in items:
                if key in seen:
                    twice.append(key)
                seen.add(key)
        return obj

    body = json.loads(raw, object_pairs_hook=pairs)
    found: list[str] = []
    if repeated:
        _repeated(body, "", repeated, found)
    return body, found


def _repeated(value: Any, path: str, repeated: dict[int, list[str]], found: list[str]) -> None:
    if isinstance(value, list):
        for index, item in enumerate(value):
            _repeated(item, f"{path}[{index}]", repeated, found)
    elif isinstance(value, dict):
        twice = repeated.get(id(value), ())
        for key, item in value.items():
            where = f"{path}.{key}" if path else key
            found.extend(where for _ in range(twice.count(key)))
            _repeated(item, where, repeated, found)


def strict_message(kind: Served, problems: list[str], *, patch: bool) -> str:
    """The real server's 400 text for ``fieldValidation=Strict`` (a patch's has no prefix), of
    problems such as ``unknown field "spec.foo"`` and ``duplicate field "spec.bar"``."""
    text = f"strict decoding error: {', '.join(problems)}"
    if patch:
        return text
    return f'{kind.kind} in version "{kind.version}" cannot be handled as a {kind.kind}: {text}'


# --- Documents --------------------------------------------------------------------------------


def _gv_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def index(kinds: Iterable[Served]) -> dict[str, Any]:
    """``/openapi/v3``: one entry per group version, its URL naming the document's hash."""
    served: dict[tuple[str, str], list[Served]] = {}
    for kind in kinds:
        served.setdefault((kind.group, kind.version), []).append(kind)
    paths = {}
    for (group, version), members in sorted(served.items()):
        body = json.dumps(document(group, version, members), sort_keys=True).encode()
        digest = hashlib.sha512(body).hexdigest().upper()[:128]
        path = _gv_path(group, version)
        paths[path] = {"serverRelativeURL": f"/openapi/v3/{path}?hash={digest}"}
    return {"paths": paths}


def _schema_name(kind: Served) -> str:
    if kind.group == "apiextensions.k8s.io":
        return f"io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.{kind.version}.{kind.kind}"
    if kind.group in ("", "storage.k8s.io", "coordination.k8s.io", "events.k8s.io"):
        short = kind.group.split(".")[0] or "core"
        return f"io.k8s.api.{short}.{kind.version}.{kind.kind}"
    reversed_group = ".".join(reversed(kind.group.split(".")))
    return f"{reversed_group}.{kind.version}.{kind.kind}"


def _schema(spec: Spec) -> dict[str, Any]:
    if spec == MAP:
        return {"type": "object", "additionalProperties": {"type": "string"}}
    if spec == ANY:
        return {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    if spec == QUANTITY:
        return {"x-kubernetes-int-or-string": True}
    if isinstance(spec, list):
        return {"type": "array", "items": _schema(spec[0])}
    if isinstance(spec, dict):
        if "*" in spec:
            return {"type": "object", "additionalProperties": _schema(spec["*"])}
        return {"type": "object", "properties": {k: _schema(v) for k, v in spec.items()}}
    return {"type": spec}


def _parameter(name: str, where: str = "query") -> dict[str, Any]:
    return {"name": name, "in": where, "schema": {"type": "string"}, "required": where == "path"}


def _operation(kind: Served, action: str, *, writes: bool) -> dict[str, Any]:
    ref = {"$ref": f"#/components/schemas/{_schema_name(kind)}"}
    operation: dict[str, Any] = {
        "operationId": f"{action}{kind.kind}",
        "responses": {"200": {"content": {"application/json": {"schema": ref}}}},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {
            "group": kind.group,
            "version": kind.version,
            "kind": kind.kind,
        },
    }
    if writes:
        operation["parameters"] = [
            _parameter(name) for name in ("dryRun", "fieldManager", "fieldValidation")
        ]
        operation["requestBody"] = {"content": {"*/*": {"schema": ref}}, "required": True}
    return operation


def _paths(kind: Served) -> dict[str, Any]:
    base = "/" + _gv_path(kind.group, kind.version)
    scope = f"{base}/namespaces/{{namespace}}" if kind.namespaced else base
    namespace = [_parameter("namespace", "path")] if kind.namespaced else []
    item = [_parameter("name", "path"), *namespace]
    paths = {
        f"{scope}/{kind.plural}": {
            "parameters": namespace,
            "get": _operation(kind, "list", writes=False),
            "post": _operation(kind, "post", writes=True),
        },
        f"{scope}/{kind.plural}/{{name}}": {
            "parameters": item,
            "get": _operation(kind, "get", writes=False),
            "put": _operation(kind, "put", writes=True),
            "patch": _operation(kind, "patch", writes=True),
            "delete": _operation(kind, "delete", writes=False),
        },
    }
    if kind.status:
        paths[f"{scope}/{kind.plural}/{{name}}/status"] = {
            "parameters": item,
            "get": _operation(kind, "get", writes=False),
            "put": _operation(kind, "put", writes=True),
            "patch": _operation(kind, "patch", writes=True),
        }
    return paths


def document(group: str, version: str, kinds: Iterable[Served]) -> dict[str, Any]:
    """The OpenAPI v3 document of one group version."""
    served = sorted(
        (kind for kind in kinds if (kind.group, kind.version) == (group, version)),
        key=lambda kind: kind.plural,
    )
    paths: dict[str, Any] = {}
    schemas: dict[str, Any] = {_META_SCHEMA: _schema(_METADATA)}
    for kind in served:
        paths.update(_paths(kind))
        schema = _schema(_fields(kind))
        schema["properties"]["metadata"] = {"$ref": f"#/components/schemas/{_META_SCHEMA}"}
        schema["x-kubernetes-group-version-kind"] = [
            {"group": kind.group, "kind": kind.kind, "version": kind.version}
        ]
        schemas[_schema_name(kind)] = schema
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": KUBERNETES_VERSION},
        "paths": paths,
        "components": {"schemas": schemas},
    }


def served_document(path: str, kinds: Iterable[Served]) -> Mapping[str, Any] | None:
    """The document at ``/openapi/v3/<path>`` (``api/v1``, ``apis/<group>/<version>``)."""
    parts = path.strip("/").split("/")
    if parts[:1] == ["api"] and len(parts) == 2:
        group, version = "", parts[1]
    elif parts[:1] == ["apis"] and len(parts) == 3:
        group, version = parts[1], parts[2]
    else:
        return None
    kinds = [kind for kind in kinds if (kind.group, kind.version) == (group, version)]
    return document(group, version, kinds) if kinds else None
