"""Rewriting a workload: its Go sidecars become one kopf-csi container per driver socket.

For each workload whose pod holds Go sidecars (`sidecars.role_of`), grouped by the socket they
reach (the volume and path of their `--csi-address`), the group's containers are replaced, at
the first one's place, by a kopf-csi container with:

- the flags of `mapping.plan`, `$(VAR)` references resolved from the sidecars' literal `env`
  values, or kept (with their variable) when the value comes from elsewhere (`valueFrom`);
- `POD_NAMESPACE` from the pod (kopf-csi's Leases and in-flight journal), and the sidecars'
  `NODE_NAME` and `KUBECONFIG` variables;
- the union of their volume mounts (the socket's first), a writable `/tmp` when the root file
  system is read-only;
- their resources summed (a limit only when every sidecar has one), with kopf-csi's measured
  ratio in an annotation; or, with `ratio`, the sum scaled by the measured ratio;
- the probes and the port of the sidecar whose endpoint kopf-csi serves (probes of another
  sidecar are pointed at that port);
- the first sidecar's image pull policy and security context.

Every other container (the driver, livenessprobe, node-driver-registrar, ...) and field is
left as it was. The workload carries, in the `ORIGINAL` annotation, the exact text of the
document it came from, for `--back`.
"""

from __future__ import annotations

import copy
import dataclasses
import fractions
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from kopf_csi.migration import mapping, sidecars
from kopf_csi.provisioning.quantities import QuantityError, format_binary_si, parse_quantity

__all__ = ["MEASURED", "ORIGINAL", "RESOURCES", "Rewrite", "rewrite"]

ORIGINAL = "migrate.kopf-csi.kopf.dev/original"
"""The annotation holding the original document's text (what `--back` writes back)."""

RESOURCES = "migrate.kopf-csi.kopf.dev/resources"
"""The annotation saying how the kopf-csi container's resources were made."""

MEASURED = {"memory": fractions.Fraction(33, 100), "cpu": fractions.Fraction(89, 100)}
"""kopf-csi against the four Go sidecars it replaces, in a burst (docs/benchmarks.md): peak
memory about 0.33x, CPU per volume about 0.89x."""

SERVER_FIELDS = ("resourceVersion", "uid", "creationTimestamp", "generation", "managedFields",
                 "selfLink")  # fmt: skip
"""Metadata the API server sets: not written back (a stale resourceVersion fails an apply)."""

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"

_REFERENCE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")
_KEPT_ENV = ("NODE_NAME", "KUBECONFIG")


@dataclasses.dataclass
class Rewrite:
    """What was done to one workload (or would be, with refusals: nothing)."""

    workload: str  # kind namespace/name
    replaced: list[list[str]]  # per kopf-csi container: the sidecars it replaces
    containers: list[dict[str, Any]]  # the kopf-csi containers
    notes: list[str]
    refusals: list[mapping.Refusal]


def name_of(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    where = f"{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{str(obj.get('kind', '')).lower()} {where}{meta.get('name', '')}"


def rewrite(obj: dict[str, Any], *, image: str, ratio: bool = False) -> Rewrite | None:
    """Rewrite `obj` in place (unless refused); None when it holds no Go sidecar."""
    spec = sidecars.pod_spec(obj)
    if spec is None:
        return None
    containers = spec.get("containers") or []
    found = [(index, c) for index, c in enumerate(containers) if sidecars.role_of(c)]
    if not found:
        return None
    workload = name_of(obj)
    result = Rewrite(workload, [], [], [], [])
    for _, container in found:
        result.refusals += _check_image(container, workload)
    groups = _groups([c for _, c in found], spec, workload, result)
    built: list[tuple[int, dict[str, Any]]] = []
    for number, members in enumerate(groups.values()):
        name = "kopf-csi" if len(groups) == 1 else f"kopf-csi-{number + 1}"
        container = _container(name, members, spec, workload, result, image=image, ratio=ratio)
        first = containers.index(members[0][0])
        built.append((first, container))
        result.replaced.append([str(c.get("name")) for c, _ in members])
    if result.refusals:
        return result
    replaced = {id(c) for _, c in found}
    at = dict(built)
    spec["containers"] = [
        at.get(index, c)
        for index, c in enumerate(containers)
        if index in at or id(c) not in replaced
    ]
    result.containers = [c for _, c in built]
    if any(_read_only(c) for _, c in built):
        volumes = spec.setdefault("volumes", [])
        if not any(v.get("name") == "kopf-csi-tmp" for v in volumes):
            volumes.append({"name": "kopf-csi-tmp", "emptyDir": {"medium": "Memory",
                                                                 "sizeLimit": "16Mi"}})  # fmt: skip
    strip_server_fields(obj)
    return result


def strip_server_fields(obj: dict[str, Any]) -> None:
    meta = obj.get("metadata") or {}
    for key in SERVER_FIELDS:
        meta.pop(key, None)
    annotations = meta.get("annotations") or {}
    annotations.pop(LAST_APPLIED, None)
    if "annotations" in meta and not annotations:
        del meta["annotations"]
    obj.pop("status", None)


def has_server_fields(obj: Mapping[str, Any]) -> bool:
    meta = obj.get("metadata") or {}
    return "status" in obj or any(key in meta for key in SERVER_FIELDS)


def _check_image(container: Mapping[str, Any], workload: str) -> list[mapping.Refusal]:
    image = sidecars.parse_image(str(container.get("image")))
    role = sidecars.IMAGES[image.name]
    tracked = sidecars.TRACKED[role]
    name = str(container.get("name"))
    if image.major is None:
        return [mapping.Refusal(workload, name, f"image {image.reference}",
                                f"its tag names no version; kopf-csi matches {image.name}"
                                f" v{tracked} and older: use a versioned tag")]  # fmt: skip
    if image.major > tracked:
        return [mapping.Refusal(workload, name, f"image {image.reference}",
                                f"v{image.major} is newer than the {image.name} v{tracked}"
                                " whose behaviour kopf-csi matches")]  # fmt: skip
    return []


def resolve(container: Mapping[str, Any]) -> tuple[tuple[str, ...], dict[str, dict[str, Any]]]:
    """The container's arguments with `$(VAR)` resolved from its literal env values; the env
    entries of the references kept (values from elsewhere), by name."""
    env = {str(e.get("name")): e for e in container.get("env") or []}
    kept: dict[str, dict[str, Any]] = {}

    def substitute(match: re.Match[str]) -> str:
        entry = env.get(match.group(1))
        if entry is None:
            return match.group(0)  # Kubernetes leaves an unknown reference as it is
        if "value" in entry:
            return str(entry["value"])
        kept[match.group(1)] = entry
        return match.group(0)

    args = tuple(_REFERENCE.sub(substitute, str(arg)) for arg in container.get("args") or [])
    return args, kept


def _address(args: Sequence[str]) -> str:
    for index, arg in enumerate(args):
        name, has, value = arg.partition("=")
        if name.lstrip("-") == "csi-address":
            if has:
                return value.removeprefix("unix://")
            return args[index + 1].removeprefix("unix://") if index + 1 < len(args) else ""
    return mapping.DEFAULT_ADDRESS


def _groups(
    found: Sequence[dict[str, Any]], spec: Mapping[str, Any], workload: str, result: Rewrite
) -> dict[tuple[str, str], list[tuple[dict[str, Any], mapping.Sidecar]]]:
    """The sidecars by the socket they reach: (volume, path inside it)."""
    groups: dict[tuple[str, str], list[tuple[dict[str, Any], mapping.Sidecar]]] = {}
    for container in found:
        args, _ = resolve(container)
        address = _address(args)
        key = ("", address)
        for mount in container.get("volumeMounts") or []:
            path = str(mount.get("mountPath", "")).rstrip("/")
            if address.startswith(path + "/"):
                key = (str(mount.get("name")), address[len(path) :])
                break
        role = sidecars.role_of(container)
        assert role is not None
        sidecar = mapping.Sidecar(str(container.get("name")), role, args)
        groups.setdefault(key, []).append((container, sidecar))
    for members in groups.values():
        members.sort(key=lambda member: sidecars.ROLES.index(member[1].role))
    return groups


def _container(
    name: str,
    members: Sequence[tuple[dict[str, Any], mapping.Sidecar]],
    spec: Mapping[str, Any],
    workload: str,
    result: Rewrite,
    *,
    image: str,
    ratio: bool,
) -> dict[str, Any]:
    present = [sidecar.role for _, sidecar in members]
    plan = mapping.plan([s for _, s in members], workload=workload, present=present)
    result.refusals += plan.refusals
    result.notes += [f"{workload}: {note}" for note in plan.notes]
    first = members[0][0]
    by_name = {str(c.get("name")): c for c, _ in members}
    container: dict[str, Any] = {"name": name, "image": image}
    if "imagePullPolicy" in first:
        container["imagePullPolicy"] = first["imagePullPolicy"]
    container["args"] = plan.args
    container["env"] = _env(members, workload, result)
    served = by_name[plan.served[0]] if plan.served else None
    port = _port(served, plan.served[1]) if served is not None and plan.served else None
    if port is not None:
        container["ports"] = [port]
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        found = _probe(probe, members, served, port, plan.served is not None)
        if found is not None:
            container[probe] = found
    resources = _resources(members, workload, result, ratio=ratio)
    if resources:
        container["resources"] = resources
    if "securityContext" in first:
        container["securityContext"] = copy.deepcopy(first["securityContext"])
    container["volumeMounts"] = _mounts(members, workload, result)
    if _read_only(container) and not any(
        m.get("mountPath") == "/tmp" for m in container["volumeMounts"]
    ):
        container["volumeMounts"].append({"name": "kopf-csi-tmp", "mountPath": "/tmp"})
    return container


def _read_only(container: Mapping[str, Any]) -> bool:
    return bool((container.get("securityContext") or {}).get("readOnlyRootFilesystem"))


def _env(
    members: Sequence[tuple[dict[str, Any], mapping.Sidecar]], workload: str, result: Rewrite
) -> list[dict[str, Any]]:
    env: dict[str, dict[str, Any]] = {}
    dropped: set[str] = set()
    for container, _ in members:
        _, kept = resolve(container)
        for entry in container.get("env") or []:
            variable = str(entry.get("name"))
            if variable in kept or variable in _KEPT_ENV or variable == "POD_NAMESPACE":
                if variable in env and env[variable] != entry:
                    result.refusals.append(mapping.Refusal(
                        workload, str(container.get("name")), f"env {variable}",
                        "defined differently in another sidecar of this driver"))  # fmt: skip
                env[variable] = copy.deepcopy(entry)
            else:
                dropped.add(variable)
    env.setdefault("POD_NAMESPACE", {
        "name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}},
    })  # fmt: skip
    dropped -= set(env)
    if dropped:
        result.notes.append(
            f"{workload}: env {', '.join(sorted(dropped))}: resolved into the flags or not read"
            " by kopf-csi; left out"
        )
    return [env["POD_NAMESPACE"]] + [e for n, e in env.items() if n != "POD_NAMESPACE"]


def _port(container: Mapping[str, Any], endpoint: str) -> dict[str, Any] | None:
    number = int(endpoint.rpartition(":")[2])
    for port in container.get("ports") or []:
        if port.get("containerPort") == number:
            return copy.deepcopy(dict(port))
    return None


def _probe(
    kind: str,
    members: Sequence[tuple[dict[str, Any], mapping.Sidecar]],
    served: Mapping[str, Any] | None,
    port: Mapping[str, Any] | None,
    serving: bool,
) -> dict[str, Any] | None:
    """The served sidecar's probe, or another's pointed at the served port."""
    if served is not None and kind in served:
        return copy.deepcopy(dict(served[kind]))
    for container, _ in members:
        if kind in container:
            probe = copy.deepcopy(dict(container[kind]))
            if "httpGet" in probe:
                if not serving or port is None:
                    return None
                probe["httpGet"]["port"] = port.get("name") or port["containerPort"]
            return probe
    return None


def _mounts(
    members: Sequence[tuple[dict[str, Any], mapping.Sidecar]], workload: str, result: Rewrite
) -> list[dict[str, Any]]:
    mounts: dict[str, dict[str, Any]] = {}
    for container, _ in members:
        for mount in container.get("volumeMounts") or []:
            path = str(mount.get("mountPath"))
            if path in mounts and mounts[path] != mount:
                result.refusals.append(mapping.Refusal(
                    workload, str(container.get("name")), f"volumeMount {path}",
                    f"another sidecar mounts {mounts[path].get('name')} there"))  # fmt: skip
            mounts.setdefault(path, copy.deepcopy(dict(mount)))
    return list(mounts.values())


def _resources(
    members: Sequence[tuple[dict[str, Any], mapping.Sidecar]],
    workload: str,
    result: Rewrite,
    *,
    ratio: bool,
) -> dict[str, dict[str, str]]:
    """The sidecars' requests and limits summed (a limit only if every sidecar has one)."""
    names = [str(c.get("name")) for c, _ in members]
    summed: dict[str, dict[str, str]] = {}
    for part in ("requests", "limits"):
        totals: dict[str, fractions.Fraction] = {}
        counts: dict[str, int] = {}
        for container, _ in members:
            resources = container.get("resources") or {}
            values = dict(resources.get(part) or {})
            if part == "requests":  # a missing request is its limit, as Kubernetes defaults it
                values = {**(resources.get("limits") or {}), **values}
            for resource, text in values.items():
                try:
                    totals[resource] = totals.get(resource, fractions.Fraction(0)) + (
                        parse_quantity(str(text))
                    )
                except QuantityError:
                    result.refusals.append(mapping.Refusal(
                        workload, str(container.get("name")), f"resources.{part}.{resource}",
                        f"{text!r} is not a quantity"))  # fmt: skip
                counts[resource] = counts.get(resource, 0) + 1
        for resource, total in totals.items():
            if part == "limits" and counts[resource] < len(members):
                result.notes.append(
                    f"{workload}: no {resource} limit for kopf-csi: not every sidecar of"
                    f" {', '.join(names)} has one"
                )
                continue
            if ratio and resource in MEASURED:
                total *= MEASURED[resource]
            summed.setdefault(part, {})[resource] = _quantity(resource, total)
    if summed:
        how = "scaled by the measured ratio" if ratio else "summed"
        result.notes.append(
            f"{workload}: resources of {', '.join(names)} {how}; kopf-csi measured about 0.33x"
            " their peak memory and 0.89x their CPU per volume (docs/benchmarks.md)"
        )
    return summed


def _quantity(resource: str, value: fractions.Fraction) -> str:
    if resource == "cpu":
        millis = math.ceil(value * 1000)
        return f"{millis // 1000}" if millis % 1000 == 0 else f"{millis}m"
    whole = math.ceil(value)
    if ratio_unit := next((u for u, p in (("Mi", 20), ("Ki", 10)) if whole >= 2**p), None):
        power = 20 if ratio_unit == "Mi" else 10
        if whole % 2**power:
            whole = math.ceil(whole / 2**power) * 2**power  # round up to the unit
    return format_binary_si(whole)


def annotate(obj: dict[str, Any], *, original: str, done: Rewrite, ratio: bool) -> None:
    """The workload's annotations for `--back` and for the reader."""
    annotations = obj.setdefault("metadata", {}).setdefault("annotations", {})
    replaced = "; ".join(", ".join(names) for names in done.replaced)
    how = "scaled by kopf-csi's measured ratio" if ratio else "summed (the safe side)"
    annotations[RESOURCES] = (
        f"the resources of {replaced}, {how}; kopf-csi measured about 0.33x the Go sidecars'"
        " peak memory and 0.89x their CPU per volume in a burst (docs/benchmarks.md)"
    )
    annotations[ORIGINAL] = original
