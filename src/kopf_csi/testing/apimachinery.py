"""The pure parts of an API server that the emulator needs: patches, selectors, Status errors.

Named after k8s.io/apimachinery, where the real versions of these live. Everything here is
synchronous and stateless, works on plain JSON-like dicts, and never mutates its inputs: the
emulator shares unchanged sub-trees between the versions of an object, so an in-place edit
here would silently rewrite history. Storage, watches and HTTP belong to the emulator
(``store.py``, ``watches.py``, ``serving.py``).

Kept apart from the emulator only for size: these are self-contained algorithms (RFC 6902,
RFC 7386, the strategic-merge subset, label/field selector grammar) with their own tests.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = [
    "REJECTED",
    "Selector",
    "StatusError",
    "conflict",
    "json_patch",
    "managed_fields",
    "manager_name",
    "merge_patch",
    "not_found",
    "parse_field_selector",
    "parse_label_selector",
    "rejected",
    "strategic_merge_patch",
]

Selector = Callable[[Mapping[str, Any]], bool]
"""A predicate over a whole object (label selectors look at ``metadata.labels`` only)."""

_REASONS = {
    400: "BadRequest",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
}


class StatusError(Exception):
    """An API failure that is rendered as a ``kind: Status`` body with the same code."""

    def __init__(
        self,
        code: int,
        message: str,
        *,
        reason: str | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or _REASONS.get(code, "Unknown")
        self.details = None if details is None else dict(details)  # {}: sent, and empty

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
        }
        if self.details is not None:
            body["details"] = self.details
        body["code"] = self.code
        return body


REJECTED = "the server rejected our request due to an error in our request"
"""apimachinery's text for a 422 built from a server-side error (NewGenericServerResponse)."""


def _named(plural: str, group: str, name: str) -> tuple[str, dict[str, str]]:
    """How a Status names an object: `plural.group` in the message; name, group and plural
    apart in the details (the group left out for the core group, as `omitempty` does)."""
    if not group:
        return plural, {"name": name, "kind": plural}
    return f"{plural}.{group}", {"name": name, "group": group, "kind": plural}


def not_found(plural: str, group: str, name: str) -> StatusError:
    """404 for a missing object, the real server's body byte for byte (``NewNotFound``):
    ``<plural>[.<group>] "<name>" not found``."""
    qualified, details = _named(plural, group, name)
    return StatusError(404, f'{qualified} "{name}" not found', details=details)


def conflict(plural: str, group: str, name: str) -> StatusError:
    """409 for a write against a stale resourceVersion, the real server's body byte for byte.

    As apimachinery's ``NewConflict``: the message names the group-qualified plural
    (``volumeattachments.storage.k8s.io``), the details the group and the plural apart (the
    group left out for the core group, as `omitempty` does).
    """
    qualified, details = _named(plural, group, name)
    return StatusError(
        409,
        f'Operation cannot be fulfilled on {qualified} "{name}": the object has been modified; '
        "please apply your changes to the latest version and try again",
        reason="Conflict",
        details=details,
    )


def rejected() -> StatusError:
    """422 for a JSON patch that cannot be applied, byte for byte as kube-apiserver v1.36 answers.

    Every failure of the json-patch library (a failed ``test`` of the resourceVersion or of a
    list element, a path or index that does not exist, an unknown operation) is the same
    generic 422: reason ``Invalid``, a fixed message and ``details: {}``. Nothing in it says
    which operation failed, or why (measured: real-server-bodies/errors.json).
    """
    return StatusError(422, REJECTED, reason="Invalid", details={})


# --- Patches -------------------------------------------------------------------------------


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: dicts merge recursively, ``null`` deletes, the rest replaces."""
    if not isinstance(patch, Mapping):
        return patch
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# Lists that the real API server merges (patchStrategy=merge) instead of replacing. Of ObjectMeta,
# only finalizers is a list of scalars with that strategy; lists merged by key (containers,
# volumes, ...) are replaced here, which is good enough for the kinds the emulator serves.
_MERGED_SCALAR_LISTS = {("metadata", "finalizers")}


def strategic_merge_patch(target: Any, patch: Any, _path: tuple[str, ...] = ()) -> Any:
    """The subset of strategic merge patch that clients send for the kinds we serve.

    Like a merge patch, except that ``metadata.finalizers`` is unioned with the new items
    (Go: ``patchStrategy:"merge"``) and ``$deleteFromPrimitiveList/<key>`` removes items, which
    is how client-go removes a finalizer. ``$setElementOrder``, ``$retainKeys`` are ignored.
    """
    if not isinstance(patch, Mapping):
        return patch
    if patch.get("$patch") == "replace":
        return {k: v for k, v in patch.items() if k != "$patch"}
    result = dict(target) if isinstance(target, Mapping) else {}
    removals: dict[str, Sequence[Any]] = {}
    for key, value in patch.items():
        if key.startswith("$deleteFromPrimitiveList/"):
            removals[key.partition("/")[2]] = value
        elif key.startswith("$"):
            continue
        elif value is None or (isinstance(value, Mapping) and value.get("$patch") == "delete"):
            result.pop(key, None)
        elif (*_path, key) in _MERGED_SCALAR_LISTS and isinstance(value, list):
            existing = list(result.get(key) or [])
            result[key] = existing + [item for item in value if item not in existing]
        else:
            result[key] = strategic_merge_patch(result.get(key), value, (*_path, key))
    for key, items in removals.items():
        if isinstance(result.get(key), list):
            result[key] = [item for item in result[key] if item not in items]
    return result


def json_patch(target: Any, operations: Any) -> Any:
    """RFC 6902 JSON patch. Any operation that cannot be applied is the real server's 422.

    A body that is not a list of operations cannot be decoded: 400, as the server's decoding
    step answers. Everything after that (a failed ``test`` included) is `rejected()`, with no
    word of which operation failed: a client cannot tell a lost race from a bad patch by it.
    """
    if not isinstance(operations, list) or not all(isinstance(o, Mapping) for o in operations):
        raise StatusError(400, "a JSON patch must be a list of operations")
    document = copy.deepcopy(target)
    for operation in operations:
        try:
            document = _apply_operation(document, operation)
        except _PatchFailed:
            raise rejected() from None
    return document


class _PatchFailed(Exception):
    """An operation that cannot be applied (the json-patch library's error)."""


def _apply_operation(document: Any, operation: Mapping[str, Any]) -> Any:
    op, path = operation.get("op"), operation.get("path")
    if not isinstance(path, str):
        raise _PatchFailed(f"an operation without a path: {operation!r}")
    if op == "test":
        if _get(document, path) != operation.get("value"):
            raise _PatchFailed(f"testing value {path} failed")
        return document
    if op == "add":
        return _add(document, path, copy.deepcopy(operation.get("value")))
    if op == "remove":
        return _remove(document, path)
    if op == "replace":
        _get(document, path)  # replacing needs an existing value, unlike adding
        return _add(_remove(document, path), path, copy.deepcopy(operation.get("value")))
    if op in ("move", "copy"):
        source = operation.get("from")
        if not isinstance(source, str):
            raise _PatchFailed(f"{op} needs a 'from' path")
        value = copy.deepcopy(_get(document, source))
        if op == "move":
            document = _remove(document, source)
        return _add(document, path, value)
    raise _PatchFailed(f"unsupported JSON patch operation: {op!r}")


def _tokens(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise _PatchFailed(f"a JSON pointer must start with '/': {path!r}")
    return [token.replace("~1", "/").replace("~0", "~") for token in path[1:].split("/")]


def _index(container: list[Any], token: str, path: str, *, inserting: bool = False) -> int:
    if inserting and token == "-":
        return len(container)
    if not token.isdigit() or int(token) > len(container) - (0 if inserting else 1):
        raise _PatchFailed(f"the index in {path} is out of range")
    return int(token)


def _walk(document: Any, tokens: list[str], path: str) -> Any:
    for token in tokens:
        if isinstance(document, dict) and token in document:
            document = document[token]
        elif isinstance(document, list):
            document = document[_index(document, token, path)]
        else:
            raise _PatchFailed(f"the path {path} does not exist")
    return document


def _get(document: Any, path: str) -> Any:
    return _walk(document, _tokens(path), path)


def _add(document: Any, path: str, value: Any) -> Any:
    tokens = _tokens(path)
    if not tokens:
        return value
    parent, last = _walk(document, tokens[:-1], path), tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, path, inserting=True), value)
    else:
        raise _PatchFailed(f"the parent of {path} is not a container")
    return document


def _remove(document: Any, path: str) -> Any:
    tokens = _tokens(path)
    if not tokens:
        return None
    parent, last = _walk(document, tokens[:-1], path), tokens[-1]
    if isinstance(parent, dict) and last in parent:
        del parent[last]
    elif isinstance(parent, list):
        del parent[_index(parent, last, path)]
    else:
        raise _PatchFailed(f"the path {path} does not exist")
    return document


# --- Selectors -----------------------------------------------------------------------------

_LABEL_REQUIREMENT = re.compile(
    r"""^\s*(?P<negated>!)?\s*(?P<key>[A-Za-z0-9][-A-Za-z0-9_./]*)\s*
        (?:(?P<op>==|=|!=)\s*(?P<value>[-A-Za-z0-9_.]*)
          |\s(?P<setop>in|notin)\s*\((?P<values>[^()]*)\))?\s*$""",
    re.VERBOSE,
)


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside ``in (a,b)`` parentheses."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return [part for part in parts if part.strip()]


def parse_label_selector(text: str | None) -> Selector | None:
    """Equality (``=``, ``==``, ``!=``), set (``in``, ``notin``) and existence (``k``, ``!k``)."""
    if not text or not text.strip():
        return None
    checks: list[Callable[[Mapping[str, Any]], bool]] = []
    for requirement in _split_top_level(text):
        match = _LABEL_REQUIREMENT.match(requirement)
        if match is None or (match["negated"] and (match["op"] or match["setop"])):
            raise StatusError(400, f"unable to parse requirement: {requirement!r}")
        checks.append(_label_check(match))

    def selector(obj: Mapping[str, Any]) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(check(labels) for check in checks)

    return selector


def _label_check(match: re.Match[str]) -> Callable[[Mapping[str, Any]], bool]:
    key, op, setop = match["key"], match["op"], match["setop"]
    value = match["value"]
    values = {v.strip() for v in (match["values"] or "").split(",") if v.strip()}
    if match["negated"]:
        return lambda labels: key not in labels
    if op in ("=", "=="):
        return lambda labels: labels.get(key) == value
    if op == "!=":
        return lambda labels: labels.get(key) != value  # matches objects without the key too
    if setop == "in":
        return lambda labels: key in labels and labels[key] in values
    if setop == "notin":
        return lambda labels: key not in labels or labels[key] not in values
    return lambda labels: key in labels


def parse_field_selector(text: str | None) -> Selector | None:
    """``path=value``, ``path==value``, ``path!=value`` on any dotted path; absent means "".

    The real API server allows only a few fields per kind (``metadata.name``,
    ``metadata.namespace``, ``spec.nodeName`` for pods, ...); this one is more lenient.
    """
    if not text or not text.strip():
        return None
    checks: list[tuple[list[str], bool, str]] = []
    for requirement in text.split(","):
        match = re.match(r"^\s*([A-Za-z0-9_.]+)\s*(==|=|!=)\s*(.*?)\s*$", requirement)
        if match is None:
            raise StatusError(400, f"invalid field selector: {requirement!r}")
        checks.append((match[1].split("."), match[2] == "!=", match[3]))

    def selector(obj: Mapping[str, Any]) -> bool:
        return all((_field(obj, path) == value) != negated for path, negated, value in checks)

    return selector


def _field(obj: Any, path: list[str]) -> str:
    for key in path:
        obj = obj.get(key) if isinstance(obj, Mapping) else None
    if obj is None:
        return ""
    if isinstance(obj, bool):
        return "true" if obj else "false"
    return str(obj)


# --- Field managers --------------------------------------------------------------------------

_UNMANAGED_METADATA = frozenset(
    {"managedFields", "resourceVersion", "generation", "uid", "creationTimestamp",
     "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"}
)  # fmt: skip


def manager_name(field_manager: str | None, user_agent: str | None) -> str:
    """Who wrote: `fieldManager` if given, else the User-Agent up to its first ``/``.

    That is how kube-apiserver names the manager of an Update; client-go's default User-Agent
    is ``<binary>/<version> (<os>/<arch>) kubernetes/<commit>``, so a Go sidecar shows up as
    its binary's name.
    """
    if field_manager:
        return field_manager
    return (user_agent or "").split("/", 1)[0] or "unknown"


def _fields(value: Any) -> dict[str, Any]:
    """The fieldsV1 set of a value: ``f:<key>`` for map keys, ``v:<json>`` for scalar list items.

    Lists of objects are kept as one leaf: the emulator knows no list-map keys.
    """
    if isinstance(value, Mapping):
        return {f"f:{key}": _fields(item) for key, item in value.items()}
    if isinstance(value, list) and all(not isinstance(item, (Mapping, list)) for item in value):
        return {".": {}, **{"v:" + json.dumps(item): {} for item in value}}
    return {}


def _changed(old: Any, new: Any) -> dict[str, Any] | None:
    """The fieldsV1 set of what `new` sets differently from `old` (None: nothing)."""
    if old == new:
        return None
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        changed = {
            f"f:{key}": sub
            for key, item in new.items()
            if (sub := _changed(old.get(key), item)) is not None
        }
        return changed or None
    return _fields(new)


def _union(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(a)
    for key, value in b.items():
        merged[key] = _union(merged[key], value) if key in merged else value
    return merged


def _subtract(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    """`a` without the leaves that `b` now owns (an Update moves ownership to its writer)."""
    result = {}
    for key, value in a.items():
        if key not in b:
            result[key] = value
        elif value and b[key]:
            rest = _subtract(value, b[key])
            if rest:
                result[key] = rest
    return result


def _content(obj: Mapping[str, Any], subresource: str | None) -> dict[str, Any]:
    if subresource == "status":
        return {"status": obj.get("status")} if obj.get("status") is not None else {}
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in _UNMANAGED_METADATA}
    meta.pop("name", None)
    meta.pop("namespace", None)
    content = {
        k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata", "status")
    }
    if meta:
        content["metadata"] = meta
    return content


def managed_fields(
    old: Mapping[str, Any] | None,
    new: Mapping[str, Any],
    *,
    manager: str,
    subresource: str | None,
    time: str,
) -> list[dict[str, Any]]:
    """`new`'s ``metadata.managedFields`` after `manager` wrote it with an Update.

    One entry per (manager, subresource); the fields this write set move to its entry, and an
    entry left with no fields goes, as the real server's managedFields do.
    """
    before = (old or {}).get("metadata", {}).get("managedFields") or []
    changed = _changed(_content(old or {}, subresource), _content(new, subresource)) or {}
    entries: list[dict[str, Any]] = []
    mine: dict[str, Any] | None = None
    for entry in before:
        if entry.get("manager") == manager and entry.get("subresource") == subresource:
            mine = entry
            continue
        fields = _subtract(entry.get("fieldsV1") or {}, changed)
        if fields:
            entries.append({**entry, "fieldsV1": fields})
    fields = _union((mine or {}).get("fieldsV1") or {}, changed)
    if fields:
        entry = {"manager": manager, "operation": "Update",
                 "apiVersion": new.get("apiVersion", "v1"), "time": time,
                 "fieldsType": "FieldsV1", "fieldsV1": fields}  # fmt: skip
        if subresource:
            entry["subresource"] = subresource
        entries.append(entry)
    return entries
