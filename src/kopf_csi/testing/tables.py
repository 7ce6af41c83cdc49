"""The server-side tables kubectl prints: ``Accept: application/json;as=Table;v=v1;g=meta.k8s.io``.

A real API server answers ``kubectl get`` with a ``meta.k8s.io/v1`` Table: column definitions and
one row of cells per object, with the object's metadata beside each row (kubectl takes the
NAMESPACE column from there). The columns of each kind are one entry of ``COLUMNS`` below:

- the built-in kinds as kube-apiserver v1.36 prints them (pkg/printers/internalversion: the
  cells, ``<unset>`` and ``Terminating`` included, the descriptions its tables carry): claims,
  volumes, attachments, classes, and core events (``kubectl get events``: every cell of the
  wide row, kubectl hides the priority-1 columns; their descriptions are the Event fields' API
  docs, not held to a recorded table);
- the snapshot and group snapshot kinds from their CRDs' ``additionalPrinterColumns``
  (manifests/crds; a test holds the two together), as apiextensions-apiserver converts them:
  a missing value is ``null``, a ``date`` is an age, a column without a description says its
  JSONPath;
- any other kind gets the generic table of a kind without a printer: Name and Created At. The
  real server prints nodes, pods, namespaces, secrets, leases, CSINodes, ... with columns of
  their own, which are not reproduced here.

A watch asked as a Table (`kubectl get -w`) gets one Table per event, the column definitions in
the first only (the emulator's `serving._table_events`).

Pure: the emulator hands over the objects of a LIST or a GET and the list's metadata.
"""

from __future__ import annotations

import dataclasses
import datetime
import fractions
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from kopf_csi.provisioning.quantities import QuantityError, format_binary_si, parse_quantity

__all__ = [
    "COLUMNS",
    "Column",
    "human_duration",
    "table",
    "wants_table",
]

Body = Mapping[str, Any]
Cell = str | int | float | bool | None

_NAME_DOC = (
    "Name must be unique within a namespace. Is required when creating resources, although "
    "some resources may allow a client to request the generation of an appropriate name "
    "automatically. Name is primarily intended for creation idempotence and configuration "
    "definition. Cannot be updated. More info: "
    "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names"
)
_CREATED_DOC = (
    "CreationTimestamp is a timestamp representing the server time when this object was "
    "created. It is not guaranteed to be set in happens-before order across separate "
    "operations. Clients may not set this value. It is represented in RFC3339 form and is in "
    "UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"
)
_PV_DOCS = "https://kubernetes.io/docs/concepts/storage/persistent-volumes"


@dataclasses.dataclass(frozen=True)
class Column:
    """One column: its definition as the Table carries it, and how an object's cell is made."""

    name: str
    type: str
    description: str
    cell: Callable[[Body, datetime.datetime], Cell]
    format: str = ""
    priority: int = 0

    def definition(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.type,
            "format": self.format,
            "description": self.description,
            "priority": self.priority,
        }


def human_duration(seconds: float) -> str:
    """apimachinery's ``duration.HumanDuration``: the AGE kubectl shows (``4s``, ``64m``)."""
    whole = int(seconds)
    if whole < -1:
        return "<invalid>"
    if whole < 0:
        return "0s"
    if whole < 120:
        return f"{whole}s"
    minutes = whole // 60
    if minutes < 10:
        return f"{minutes}m{whole % 60}s" if whole % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = whole // 3600
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d{hours % 24}h" if hours % 24 else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        years, days = hours // 24 // 365, hours // 24 % 365
        return f"{years}y{days}d" if days else f"{years}y"
    return f"{hours // 24 // 365}y"


def _age_of(timestamp: Any, now: datetime.datetime) -> str:
    if not isinstance(timestamp, str) or not timestamp:
        return "<unknown>"
    try:
        then = datetime.datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return "<invalid>"
    return human_duration((now - then).total_seconds())


def _get(obj: Any, path: str) -> Any:
    """A simple JSONPath (``.spec.source.name``), as CRD columns use; None when missing."""
    for key in path.strip(".").split("."):
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def _text(path: str) -> Callable[[Body, datetime.datetime], Cell]:
    return lambda obj, now: str(_get(obj, path) or "")


def _age(obj: Body, now: datetime.datetime) -> Cell:
    return _age_of(obj["metadata"].get("creationTimestamp"), now)


def _quantity(text: Any) -> str:
    """``Quantity.String()``: the canonical form (``1024Mi`` is ``1Gi``, ``1000M`` is ``1G``)."""
    if not isinstance(text, str) or not text:
        return "0"
    try:
        value = parse_quantity(text)
    except QuantityError:
        return text
    if text[-2:] in ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei") and value.denominator == 1:
        return format_binary_si(int(value))
    return _decimal_si(value)


def _decimal_si(value: fractions.Fraction) -> str:
    """DecimalSI: the largest suffix that keeps a whole number (finer than nano rounds up)."""
    exponent = -9
    for candidate in _DECIMAL_SUFFIXES:
        if (value / fractions.Fraction(10) ** candidate).denominator == 1:
            exponent = candidate
    mantissa = math.ceil(value / fractions.Fraction(10) ** exponent)
    return f"{mantissa}{_DECIMAL_SUFFIXES[exponent]}" if mantissa else "0"


_DECIMAL_SUFFIXES = {
    -9: "n",
    -6: "u",
    -3: "m",
    0: "",
    3: "k",
    6: "M",
    9: "G",
    12: "T",
    15: "P",
    18: "E",
}


_MODES = (
    ("ReadWriteOnce", "RWO"), ("ReadOnlyMany", "ROX"), ("ReadWriteMany", "RWX"),
    ("ReadWriteOncePod", "RWOP"),
)  # fmt: skip


def _modes(modes: Any) -> str:
    """``GetAccessModesAsString``: each mode once, in this order."""
    given = set(modes or ())
    return ",".join(short for mode, short in _MODES if mode in given)


def _phase(obj: Body) -> str:
    if obj["metadata"].get("deletionTimestamp"):
        return "Terminating"
    return str(_get(obj, ".status.phase") or "")


def _class_of(obj: Body, spec_field: str) -> str:
    """The beta annotation wins over the field, as ``GetPersistentVolume[Claim]Class``."""
    annotations = obj["metadata"].get("annotations") or {}
    if "volume.beta.kubernetes.io/storage-class" in annotations:
        return str(annotations["volume.beta.kubernetes.io/storage-class"])
    return str(_get(obj, spec_field) or "")


def _or_unset(path: str) -> Callable[[Body, datetime.datetime], Cell]:
    return lambda obj, now: str(_get(obj, path) or "<unset>")


def _claim_capacity(obj: Body, now: datetime.datetime) -> Cell:
    bound = _get(obj, ".spec.volumeName")
    return _quantity(_get(obj, ".status.capacity.storage")) if bound else ""


def _claim_modes(obj: Body, now: datetime.datetime) -> Cell:
    return _modes(_get(obj, ".status.accessModes")) if _get(obj, ".spec.volumeName") else ""


def _claim_ref(obj: Body, now: datetime.datetime) -> Cell:
    ref = _get(obj, ".spec.claimRef")
    return f"{ref.get('namespace', '')}/{ref.get('name', '')}" if isinstance(ref, Mapping) else ""


def _class_name(obj: Body, now: datetime.datetime) -> Cell:
    annotations = obj["metadata"].get("annotations") or {}
    default = any(
        annotations.get(f"storageclass.{beta}kubernetes.io/is-default-class") == "true"
        for beta in ("", "beta.")
    )
    return str(obj["metadata"]["name"]) + (" (default)" if default else "")


def _event_first(obj: Body, now: datetime.datetime) -> Cell:
    """``printEvent``'s first-seen: ``firstTimestamp``, else the new API's ``eventTime``."""
    return _age_of(obj.get("firstTimestamp") or obj.get("eventTime"), now)


def _event_last(obj: Body, now: datetime.datetime) -> Cell:
    """Last seen: the series' last observation, else ``lastTimestamp``, else first seen."""
    series = obj.get("series")
    if isinstance(series, Mapping):
        return _age_of(series.get("lastObservedTime"), now)
    if obj.get("lastTimestamp"):
        return _age_of(obj["lastTimestamp"], now)
    return _event_first(obj, now)


def _event_count(obj: Body, now: datetime.datetime) -> Cell:
    """The series' count, else ``count``; a singleton of the new API (no count) is 1."""
    series = obj.get("series")
    if isinstance(series, Mapping):
        return int(series.get("count") or 0)
    return int(obj.get("count") or 0) or 1


def _event_object(obj: Body, now: datetime.datetime) -> Cell:
    """``kind/name`` of the involved object, its kind in lower case: ``persistentvolumeclaim/x``."""
    involved = obj.get("involvedObject") or {}
    kind = str(involved.get("kind") or "").lower()
    return f"{kind}/{involved['name']}" if involved.get("name") else kind


def _event_source(obj: Body, now: datetime.datetime) -> Cell:
    """``component, host``: the source's, else the reporting controller's and instance's."""
    source = obj.get("source") or {}
    component = source.get("component") or obj.get("reportingComponent") or ""
    instance = source.get("host") or obj.get("reportingInstance") or ""
    return f"{component}, {instance}" if instance else str(component)


def _pod_containers(obj: Body) -> list[Any]:
    return list((obj.get("spec") or {}).get("containers") or [])


def _pod_ready(obj: Body, now: datetime.datetime) -> Cell:
    """``printPod``'s READY: ready containers of all the pod's containers (``0/1``)."""
    statuses = (obj.get("status") or {}).get("containerStatuses") or []
    ready = sum(1 for status in statuses if status.get("ready"))
    return f"{ready}/{len(_pod_containers(obj))}"


def _pod_status(obj: Body, now: datetime.datetime) -> Cell:
    """``printPod``'s STATUS, for what the emulator has (no kubelet, so no container states):
    the status's reason, else its phase; ``Terminating`` once deleted."""
    status = obj.get("status") or {}
    reason = str(status.get("reason") or status.get("phase") or "")
    if (obj.get("metadata") or {}).get("deletionTimestamp"):
        return "Unknown" if reason == "NodeLost" else "Terminating"
    return reason


def _pod_restarts(obj: Body, now: datetime.datetime) -> Cell:
    """The containers' restarts, summed (``0`` without container statuses)."""
    statuses = (obj.get("status") or {}).get("containerStatuses") or []
    return sum(int(status.get("restartCount") or 0) for status in statuses)


def _or_none(path: str) -> Callable[[Body, datetime.datetime], Cell]:
    """The field's text, ``<none>`` when empty (the pod table's IP and node columns)."""
    return lambda obj, now: str(_get(obj, path) or "") or "<none>"


def _readiness_gates(obj: Body, now: datetime.datetime) -> Cell:
    """``ready/total`` of the pod's readiness gates' conditions, ``<none>`` without gates."""
    gates = (obj.get("spec") or {}).get("readinessGates") or []
    if not gates:
        return "<none>"
    conditions = {c.get("type"): c.get("status") for c in (obj.get("status") or {}).get(
        "conditions") or []}  # fmt: skip
    ready = sum(1 for gate in gates if conditions.get(gate.get("conditionType")) == "True")
    return f"{ready}/{len(gates)}"


def _node_status(obj: Body, now: datetime.datetime) -> Cell:
    """``printNode``'s STATUS: ``Ready`` when the Ready condition is True, ``NotReady`` for any
    other status of it, ``Unknown`` without one (no kubelet has reported);
    ``,SchedulingDisabled`` when cordoned."""
    conditions = (obj.get("status") or {}).get("conditions") or []
    ready = {c.get("type"): c.get("status") for c in conditions}.get("Ready")
    text = "Unknown" if ready is None else "Ready" if ready == "True" else "NotReady"
    if (obj.get("spec") or {}).get("unschedulable"):
        text += ",SchedulingDisabled"
    return text


def _node_roles(obj: Body, now: datetime.datetime) -> Cell:
    """``findNodeRoles``: the roles of the ``node-role.kubernetes.io/<role>`` labels and the
    value of a ``kubernetes.io/role`` label, sorted, each once; ``<none>`` without."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    prefix = "node-role.kubernetes.io/"
    roles = {key.removeprefix(prefix) for key in labels if key.startswith(prefix)}
    roles.add(str(labels.get("kubernetes.io/role") or ""))
    return ",".join(sorted(role for role in roles if role)) or "<none>"


def _node_address(kind: str) -> Callable[[Body, datetime.datetime], Cell]:
    """The node's first address of `kind` (``InternalIP``, ``ExternalIP``), ``<none>``."""

    def cell(obj: Body, now: datetime.datetime) -> Cell:
        addresses = (obj.get("status") or {}).get("addresses") or []
        found = [a.get("address") for a in addresses if a.get("type") == kind]
        return str(found[0]) if found else "<none>"

    return cell


def _node_info(field: str) -> Callable[[Body, datetime.datetime], Cell]:
    """A ``status.nodeInfo`` field of the wide columns, ``<unknown>`` when no kubelet has
    reported it (the VERSION column prints the kubelet's version as it is, empty without)."""
    return lambda obj, now: str(_get(obj, f".status.nodeInfo.{field}") or "") or "<unknown>"


def _crd_column(
    name: str, type_: str, path: str, description: str = "", priority: int = 0
) -> Column:
    """An ``additionalPrinterColumns`` entry, converted as apiextensions-apiserver does."""

    def cell(obj: Body, now: datetime.datetime) -> Cell:
        value = _get(obj, path)
        if value is None or value == "":
            return None
        if type_ == "date":
            return _age_of(value, now)
        if type_ == "string":
            return value if isinstance(value, str) else _crd_text(value)
        if type_ == "integer" and isinstance(value, int | float) and not isinstance(value, bool):
            return int(value)
        if type_ == "number" and isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        if type_ == "boolean" and isinstance(value, bool):
            return value
        return None

    doc = description or f"Custom resource definition column (in JSONPath format): {path}"
    return Column(name, type_, doc, cell, priority=priority)


def _crd_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


_NAME = Column("Name", "string", _NAME_DOC, lambda obj, now: obj["metadata"]["name"], "name")
_AGE = Column("Age", "string", _CREATED_DOC, _age)
_CRD_AGE = _crd_column("Age", "date", ".metadata.creationTimestamp")

COLUMNS: dict[tuple[str, str], tuple[Column, ...]] = {
    ("", "persistentvolumeclaims"): (
        _NAME,
        Column(
            "Status", "string", "phase represents the current phase of PersistentVolumeClaim.",
            lambda obj, now: _phase(obj),
        ),
        Column(
            "Volume", "string",
            "volumeName is the binding reference to the PersistentVolume backing this claim.",
            _text(".spec.volumeName"),
        ),
        Column(
            "Capacity", "string",
            "capacity represents the actual resources of the underlying volume.",
            _claim_capacity,
        ),
        Column(
            "Access Modes", "string",
            "accessModes contains the actual access modes the volume backing the PVC has. "
            f"More info: {_PV_DOCS}#access-modes-1",
            _claim_modes,
        ),
        Column(
            "StorageClass", "string", "StorageClass of the pvc",
            lambda obj, now: _class_of(obj, ".spec.storageClassName"),
        ),
        Column(
            "VolumeAttributesClass", "string", "VolumeAttributesClass of the pvc",
            _or_unset(".spec.volumeAttributesClassName"),
        ),
        _AGE,
        Column(
            "VolumeMode", "string",
            "volumeMode defines what type of volume is required by the claim. Value of "
            "Filesystem is implied when not included in claim spec.",
            _or_unset(".spec.volumeMode"), priority=1,
        ),
    ),
    ("", "persistentvolumes"): (
        _NAME,
        Column(
            "Capacity", "string",
            "capacity is the description of the persistent volume's resources and capacity. "
            f"More info: {_PV_DOCS}#capacity",
            lambda obj, now: _quantity(_get(obj, ".spec.capacity.storage")),
        ),
        Column(
            "Access Modes", "string",
            f"accessModes contains all ways the volume can be mounted. More info: {_PV_DOCS}"
            "#access-modes",
            lambda obj, now: _modes(_get(obj, ".spec.accessModes")),
        ),
        Column(
            "Reclaim Policy", "string",
            "persistentVolumeReclaimPolicy defines what happens to a persistent volume when "
            "released from its claim. Valid options are Retain (default for manually created "
            "PersistentVolumes), Delete (default for dynamically provisioned "
            "PersistentVolumes), and Recycle (deprecated). Recycle must be supported by the "
            f"volume plugin underlying this PersistentVolume. More info: {_PV_DOCS}#reclaiming",
            _text(".spec.persistentVolumeReclaimPolicy"),
        ),
        Column(
            "Status", "string",
            "phase indicates if a volume is available, bound to a claim, or released by a "
            f"claim. More info: {_PV_DOCS}#phase",
            lambda obj, now: _phase(obj),
        ),
        Column(
            "Claim", "string",
            "claimRef is part of a bi-directional binding between PersistentVolume and "
            "PersistentVolumeClaim. Expected to be non-nil when bound. claim.VolumeName is the "
            f"authoritative bind between PV and PVC. More info: {_PV_DOCS}#binding",
            _claim_ref,
        ),
        Column(
            "StorageClass", "string", "StorageClass of the pv",
            lambda obj, now: _class_of(obj, ".spec.storageClassName"),
        ),
        Column(
            "VolumeAttributesClass", "string", "VolumeAttributesClass of the pv",
            _or_unset(".spec.volumeAttributesClassName"),
        ),
        Column(
            "Reason", "string",
            "reason is a brief CamelCase string that describes any failure and is meant for "
            "machine parsing and tidy display in the CLI.",
            _text(".status.reason"),
        ),
        _AGE,
        Column(
            "VolumeMode", "string",
            "volumeMode defines if a volume is intended to be used with a formatted filesystem "
            "or to remain in raw block state. Value of Filesystem is implied when not included "
            "in spec.",
            _or_unset(".spec.volumeMode"), priority=1,
        ),
    ),
    ("storage.k8s.io", "volumeattachments"): (
        _NAME,
        Column(
            "Attacher", "string",
            "attacher indicates the name of the volume driver that MUST handle this request. "
            "This is the name returned by GetPluginName().",
            _text(".spec.attacher"), format="name",
        ),
        Column(
            "PV", "string",
            "persistentVolumeName represents the name of the persistent volume to attach.",
            _text(".spec.source.persistentVolumeName"),
        ),
        Column(
            "Node", "string",
            "nodeName represents the node that the volume should be attached to.",
            _text(".spec.nodeName"),
        ),
        Column(
            "Attached", "boolean",
            "attached indicates the volume is successfully attached. This field must only be "
            "set by the entity completing the attach operation, i.e. the external-attacher.",
            lambda obj, now: bool(_get(obj, ".status.attached")),
        ),
        _AGE,
    ),
    ("storage.k8s.io", "storageclasses"): (
        Column("Name", "string", _NAME_DOC, _class_name, "name"),
        Column(
            "Provisioner", "string", "provisioner indicates the type of the provisioner.",
            _text(".provisioner"),
        ),
        Column(
            "ReclaimPolicy", "string",
            "reclaimPolicy controls the reclaimPolicy for dynamically provisioned "
            "PersistentVolumes of this storage class. Defaults to Delete.",
            lambda obj, now: str(obj.get("reclaimPolicy") or "Delete"),
        ),
        Column(
            "VolumeBindingMode", "string",
            "volumeBindingMode indicates how PersistentVolumeClaims should be provisioned and "
            "bound.  When unset, VolumeBindingImmediate is used. This field is only honored by "
            "servers that enable the VolumeScheduling feature.",
            lambda obj, now: str(obj.get("volumeBindingMode") or "Immediate"),
        ),
        Column(
            "AllowVolumeExpansion", "string",
            "allowVolumeExpansion shows whether the storage class allow volume expand.",
            lambda obj, now: bool(obj.get("allowVolumeExpansion")),
        ),
        _AGE,
    ),
    ("", "pods"): (  # printPod: no kubelet here, so no container states
        _NAME,
        Column(
            "Ready", "string", "How many of the pod's containers are ready, of all of them.",
            _pod_ready,
        ),
        Column(
            "Status", "string", "The pod's state in a word: its reason, else its phase.",
            _pod_status,
        ),
        Column(
            "Restarts", "string", "How many times the pod's containers have restarted.",
            _pod_restarts,
        ),
        _AGE,
        Column(
            "IP", "string", "The IP address given to the pod.", _or_none(".status.podIP"),
            priority=1,
        ),
        Column(
            "Node", "string", "The node the pod is scheduled to.", _or_none(".spec.nodeName"),
            priority=1,
        ),
        Column(
            "Nominated Node", "string",
            "The node the scheduler means to place the pod on once others make room.",
            _or_none(".status.nominatedNodeName"), priority=1,
        ),
        Column(
            "Readiness Gates", "string",
            "Of the pod's readiness gates, how many have their condition true.",
            _readiness_gates, priority=1,
        ),
    ),
    ("", "nodes"): (  # printNode
        _NAME,
        Column("Status", "string", "The status of the node", _node_status),
        Column("Roles", "string", "The roles of the node", _node_roles),
        _AGE,
        Column("Version", "string", "Kubelet Version reported by the node.",
               _text(".status.nodeInfo.kubeletVersion")),
        Column("Internal-IP", "string", "List of internal IPs.", _node_address("InternalIP"),
               priority=1),
        Column("External-IP", "string", "List of external IPs.", _node_address("ExternalIP"),
               priority=1),
        Column("OS-Image", "string",
               "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 "
               "(wheezy)).", _node_info("osImage"), priority=1),
        Column("Kernel-Version", "string",
               "Kernel Version reported by the node from 'uname -r' (e.g. "
               "3.16.0-0.bpo.4-amd64).", _node_info("kernelVersion"), priority=1),
        Column("Container-Runtime", "string",
               "ContainerRuntime Version reported by the node through runtime remote API (e.g. "
               "containerd://1.4.2).", _node_info("containerRuntimeVersion"), priority=1),
    ),
    ("", "events"): (
        Column(
            "Last Seen", "string",
            "The time at which the most recent occurrence of this event was recorded.",
            _event_last,
        ),
        Column(
            "Type", "string",
            "Type of this event (Normal, Warning), new types could be added in the future",
            _text(".type"),
        ),
        Column(
            "Reason", "string",
            "This should be a short, machine understandable string that gives the reason for "
            "the transition into the object's current status.",
            _text(".reason"),
        ),
        Column("Object", "string", "The object that this event is about.", _event_object),
        Column(
            "Subobject", "string",
            "If referring to a piece of an object instead of an entire object, this string "
            "should contain a valid JSON/Go field access statement, such as "
            "desiredState.manifest.containers[2].",
            _text(".involvedObject.fieldPath"), priority=1,
        ),
        Column(
            "Source", "string",
            "The component reporting this event. Should be a short machine understandable "
            "string.",
            _event_source, priority=1,
        ),
        Column(
            "Message", "string", "A human-readable description of the status of this operation.",
            lambda obj, now: str(obj.get("message") or "").strip(),
        ),
        Column(
            "First Seen", "string",
            "The time at which the event was first recorded. (Time of server receipt is in "
            "TypeMeta.)",
            _event_first, priority=1,
        ),
        Column(
            "Count", "string", "The number of times this event has occurred.", _event_count,
            priority=1,
        ),
        Column(
            "Name", "string", _NAME_DOC, lambda obj, now: obj["metadata"]["name"], "name",
            priority=1,
        ),
    ),
    # manifests/crds, additionalPrinterColumns (tests/emulator/test_tables.py compares them).
    ("snapshot.storage.k8s.io", "volumesnapshots"): (
        _NAME,
        _crd_column("ReadyToUse", "boolean", ".status.readyToUse"),
        _crd_column("SourcePVC", "string", ".spec.source.persistentVolumeClaimName"),
        _crd_column("SourceSnapshotContent", "string", ".spec.source.volumeSnapshotContentName"),
        _crd_column("RestoreSize", "string", ".status.restoreSize"),
        _crd_column("SnapshotClass", "string", ".spec.volumeSnapshotClassName"),
        _crd_column("SnapshotContent", "string", ".status.boundVolumeSnapshotContentName"),
        _crd_column("CreationTime", "date", ".status.creationTime"),
        _CRD_AGE,
    ),
    ("snapshot.storage.k8s.io", "volumesnapshotcontents"): (
        _NAME,
        _crd_column("ReadyToUse", "boolean", ".status.readyToUse"),
        _crd_column("RestoreSize", "integer", ".status.restoreSize", "Bytes."),
        _crd_column("DeletionPolicy", "string", ".spec.deletionPolicy"),
        _crd_column("Driver", "string", ".spec.driver"),
        _crd_column("VolumeSnapshotClass", "string", ".spec.volumeSnapshotClassName"),
        _crd_column("VolumeSnapshot", "string", ".spec.volumeSnapshotRef.name"),
        _crd_column("VolumeSnapshotNamespace", "string", ".spec.volumeSnapshotRef.namespace"),
        _CRD_AGE,
    ),
    ("snapshot.storage.k8s.io", "volumesnapshotclasses"): (
        _NAME,
        _crd_column("Driver", "string", ".driver"),
        _crd_column(
            "DeletionPolicy", "string", ".deletionPolicy",
            "What happens to a VolumeSnapshotContent when its VolumeSnapshot is deleted.",
        ),
        _CRD_AGE,
    ),
    ("groupsnapshot.storage.k8s.io", "volumegroupsnapshots"): (
        _NAME,
        _crd_column("ReadyToUse", "boolean", ".status.readyToUse"),
        _crd_column("VolumeGroupSnapshotClass", "string", ".spec.volumeGroupSnapshotClassName"),
        _crd_column(
            "VolumeGroupSnapshotContent", "string", ".status.boundVolumeGroupSnapshotContentName"
        ),
        _crd_column("CreationTime", "date", ".status.creationTime"),
        _CRD_AGE,
    ),
    ("groupsnapshot.storage.k8s.io", "volumegroupsnapshotcontents"): (
        _NAME,
        _crd_column("ReadyToUse", "boolean", ".status.readyToUse"),
        _crd_column("DeletionPolicy", "string", ".spec.deletionPolicy"),
        _crd_column("Driver", "string", ".spec.driver"),
        _crd_column("VolumeGroupSnapshotClass", "string", ".spec.volumeGroupSnapshotClassName"),
        _crd_column("VolumeGroupSnapshot", "string", ".spec.volumeGroupSnapshotRef.name"),
        _crd_column(
            "VolumeGroupSnapshotNamespace", "string", ".spec.volumeGroupSnapshotRef.namespace"
        ),
        _CRD_AGE,
    ),
    ("groupsnapshot.storage.k8s.io", "volumegroupsnapshotclasses"): (
        _NAME,
        _crd_column("Driver", "string", ".driver"),
        _crd_column("DeletionPolicy", "string", ".deletionPolicy"),
        _CRD_AGE,
    ),
}  # fmt: skip
"""The columns of each kind, by (group, plural)."""

_GENERIC = (
    _NAME,
    Column(
        "Created At", "date", _CREATED_DOC,
        lambda obj, now: str(obj["metadata"].get("creationTimestamp") or ""),
    ),
)  # fmt: skip


def wants_table(accept: str) -> bool:
    """Whether an Accept header asks for a meta.k8s.io/v1 Table (kubectl get does)."""
    for option in accept.split(","):
        params = {
            key.strip(): value.strip()
            for key, _, value in (part.partition("=") for part in option.split(";")[1:])
        }
        if params.get("as") == "Table" and params.get("g") == "meta.k8s.io":
            return params.get("v") == "v1"
    return False


def table(
    group: str,
    plural: str,
    objects: Iterable[Body],
    *,
    metadata: Mapping[str, Any],
    include_object: str | None = None,
    now: datetime.datetime | None = None,
) -> dict[str, Any]:
    """The Table of these objects; ``include_object`` as the query's (``None``, ``Object``,
    or the default ``Metadata``: a PartialObjectMetadata beside each row)."""
    now = now or datetime.datetime.now(datetime.UTC)
    columns: Sequence[Column] = COLUMNS.get((group, plural), _GENERIC)
    rows = []
    for obj in objects:
        row: dict[str, Any] = {"cells": [column.cell(obj, now) for column in columns]}
        if include_object == "Object":
            row["object"] = obj
        elif include_object != "None":
            row["object"] = {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": obj["metadata"],
            }
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": dict(metadata),
        "columnDefinitions": [column.definition() for column in columns],
        "rows": rows,
    }
