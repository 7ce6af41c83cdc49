"""The diagnosis: a pure function from what was read (`Observed`) to a verdict (`Diagnosis`).

Each kind has a chain, walked in the order its object depends on things; every step adds one
line of evidence, and the first step that finds something wrong ends the walk with a blocker
and what to do. Nothing here reads the API or the clock: `Observed.now` is the moment of the
reading, so every rule is table-tested on plain dicts (tests/explain/test_rules.py).

Secrets: the evidence names a secret only where the Go sidecars' own events and PV fields do
(the provisioner's `secrets "x" not found`), never a value, and never a StorageClass parameter
that names or holds a secret (`csi.storage.k8s.io/*secret*`).
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NoReturn

from kopf_csi import names
from kopf_csi.explain.observed import Body, Diagnosis, Observed, State
from kopf_csi.leases import holders_text, parse_microtime
from kopf_csi.provisioning.quantities import format_binary_si, parse_quantity

__all__ = [
    "diagnose",
    "event_time",
    "grpc_code",
    "is_secret_parameter",
    "lease_is_live",
    "size",
]

IN_PROGRESS_CODES = frozenset({"Canceled", "DeadlineExceeded", "Unavailable", "Aborted"})
"""gRPC codes after which the driver may still be working (external-provisioner `checkError`):
retried, and not the driver's final word."""

PROTECTION_FINALIZERS = frozenset({"kubernetes.io/pv-protection", "kubernetes.io/pvc-protection"})

IN_WORK_AFTER = 60.0
"""Seconds an operator's worker may stay on one object before explain calls it held in work.

One attempt makes a CSI call or two, each cut off at its timeout (`--timeout`: 10 s by default,
the attacher's 15 s), and a few API requests of a second or less; twice the longest default
timeout is 30 s. A worker on one object for a minute is held by something no timeout ends, and
the verdict names what. An operator run with a long `--timeout` warrants a longer wait: explain's
`--in-work-after`."""

_CODE = re.compile(r"code = (\w+)")

NEW_SMALLER_CLAIM = (
    "or ask for less: a claim's request cannot be lowered, so delete the claim and make a new"
    " one with a smaller spec.resources.requests.storage"
)
"""The way to "ask for less": the API refuses to lower a claim's request (it may only grow,
and only once bound), so the only smaller claim is a new one."""


class _Stop(Exception):
    def __init__(self, diagnosis: Diagnosis) -> None:
        self.diagnosis = diagnosis


class _Walk:
    """The evidence gathered so far along one chain, and the ways a walk ends."""

    def __init__(self, seen: Observed, *, in_work_after: float = IN_WORK_AFTER) -> None:
        self.seen = seen
        self.in_work_after = in_work_after
        self.evidence: list[str] = []

    def fact(self, line: str) -> None:
        self.evidence.append(line)

    def blocked(self, blocker: str, summary: str, *steps: str) -> _Stop:
        return self._end(State.BLOCKED, summary, steps, blocker)

    def progressing(self, blocker: str, summary: str, *steps: str) -> _Stop:
        return self._end(State.PROGRESSING, summary, steps, blocker)

    def healthy(self, summary: str) -> Diagnosis:
        return Diagnosis(self.seen.target, State.HEALTHY, summary, tuple(self.evidence))

    def _end(self, state: State, summary: str, steps: Iterable[str], blocker: str) -> _Stop:
        self._operator_facts()
        diagnosis = Diagnosis(
            self.seen.target, state, summary, tuple(self.evidence), tuple(steps), blocker
        )
        return _Stop(diagnosis)

    def _operator_facts(self) -> None:
        """What the operator said about the object, once, at the end (when asked)."""
        if self.seen.operator_error:
            self.fact(f"operator: {self.seen.operator_error}")
        if self.seen.operator is not None:
            self.evidence.extend(operator_lines(self.seen.operator))


def diagnose(seen: Observed, *, in_work_after: float = IN_WORK_AFTER) -> Diagnosis:
    """The verdict on `seen.target` from the objects read; an object the operator has been on
    for longer than `in_work_after` seconds is held in work (`--in-work-after`)."""
    walk = _Walk(seen, in_work_after=in_work_after)
    chain = _CHAINS[seen.target.kind]
    try:
        return chain(walk)
    except _Stop as stop:
        return stop.diagnosis


# -- helpers ----------------------------------------------------------------------------------


def _meta(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return (obj or {}).get("metadata") or {}


def _annotations(obj: Mapping[str, Any] | None) -> Mapping[str, str]:
    return _meta(obj).get("annotations") or {}


def _status(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return (obj or {}).get("status") or {}


def _spec(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return (obj or {}).get("spec") or {}


def _age(seen: Observed, timestamp: str | None) -> float | None:
    moment = parse_microtime(timestamp)
    return None if moment is None else (seen.now - moment).total_seconds()


def _ago(seconds: float | None) -> str:
    if seconds is None:
        return "at an unknown time"
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f}s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m ago"
    return f"{seconds / 3600:.1f}h ago"


def duration(seconds: float) -> str:
    """A span of time as a person reads it: `42s`, `5m12s`, `2h3m` (whole seconds)."""
    total = max(0, round(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m" if minutes else f"{hours}h"
    if minutes:
        return f"{minutes}m{secs}s" if secs else f"{minutes}m"
    return f"{secs}s"


def size(value: int) -> str:
    """A byte count as a quantity a person reads: exact where one is (`1Gi`, `900Ti`, `1G`),
    else in binary units to one decimal (`~1.2Gi`); never the 15 digits of a raw count."""
    exact = format_binary_si(value)
    if not exact.lstrip("-").isdigit() or abs(value) < 1024:
        return exact
    for exponent, suffix in ((18, "E"), (15, "P"), (12, "T"), (9, "G"), (6, "M"), (3, "k")):
        if value % 10**exponent == 0:
            return f"{value // 10**exponent}{suffix}"
    power = min((abs(value).bit_length() - 1) // 10, 6)
    return f"~{value / 2 ** (10 * power):.1f}{['', 'Ki', 'Mi', 'Gi', 'Ti', 'Pi', 'Ei'][power]}"


def grpc_code(message: str) -> str | None:
    """The gRPC code an error text carries (`rpc error: code = Internal desc = ...`)."""
    match = _CODE.search(message)
    return match[1] if match else None


def is_secret_parameter(key: str) -> bool:
    """A StorageClass parameter that names (or holds) a secret: never shown."""
    lowered = key.lower()
    return "secret" in lowered


def _warnings(seen: Observed, *reasons: str) -> list[Body]:
    """The object's Warning events with one of `reasons`, the latest first."""
    found = [
        event
        for event in seen.events
        if event.get("type") == "Warning" and (not reasons or event.get("reason") in reasons)
    ]
    return sorted(found, key=event_time, reverse=True)


def event_time(event: Mapping[str, Any]) -> str:
    """When the event last happened, as the API wrote it (RFC 3339 in UTC: sorts as text)."""
    return str(event.get("lastTimestamp") or event.get("eventTime") or "")


def _event_line(seen: Observed, event: Mapping[str, Any]) -> str:
    count = int(event.get("count") or 1)
    times = f", {count} times" if count > 1 else ""
    when = _ago(_age(seen, event_time(event)))
    return f"event {event.get('reason')} ({when}{times}): {event.get('message', '')}"


_PROVISIONER_REASONS = frozenset(
    {
        names.REASON_PROVISIONING,
        names.REASON_PROVISIONING_FAILED,
        names.REASON_PROVISIONING_SUCCEEDED,
    }
)
"""The reasons of the external provisioner's own events on a claim."""


def _has_events_from_provisioner(seen: Observed) -> bool:
    return any(event.get("reason") in _PROVISIONER_REASONS for event in seen.events)


_ROLES = {
    "persistentvolumeclaim": names.MANAGER_PROVISIONER,
    "persistentvolume": names.MANAGER_PROVISIONER,
    "volumeattachment": names.MANAGER_ATTACHER,
    "volumesnapshot": names.MANAGER_SNAPSHOTTER,
    "volumesnapshotcontent": names.MANAGER_SNAPSHOTTER,
    "volumegroupsnapshot": names.MANAGER_SNAPSHOTTER,
}
"""The role whose API requests work on each kind (its rate limit is the one that matters)."""
THROTTLED_FOR = 1.0
"""Seconds a request waited for the rate limit that make it worth the verdict."""
THROTTLED_WITHIN = 10.0
"""Seconds since such a wait ended within which it still explains a wait."""


def operator_lines(state: Mapping[str, Any]) -> list[str]:
    """The operator's knowledge of the object (its `/debug/objects` answer), one line a fact."""
    lines = []
    for queue in state.get("queues") or []:
        parts = [f"operator: in its {queue.get('queue')} queue"]
        if queue.get("processing_for") is not None:
            parts.append(f"being worked on for {queue['processing_for']:.1f}s")
        elif queue.get("position") is not None:
            parts.append(f"waiting its turn: {queue['position']} of {queue.get('depth')} queued")
            if queue.get("workers") is not None:
                parts.append(f"{queue.get('busy')} of {queue['workers']} workers busy")
        if queue.get("next_retry_in") is not None:
            parts.append(f"next retry in {queue['next_retry_in']:.1f}s")
        if queue.get("failures"):
            parts.append(f"{queue['failures']} failed attempts")
        lines.append(", ".join(parts))
    lines.extend(f"operator: {_call_text(call)}" for call in state.get("calls") or [])
    for role, limit in (state.get("rate_limits") or {}).items():
        lines.append(
            f"operator: {role}'s API requests wait for its rate limit (--kube-api-qps"
            f" {limit['qps']:g}, --kube-api-burst {limit['burst']}): {limit['delayed']} waited,"
            f" {limit['waited']:.1f}s in all; the latest {limit['last_delay']:.1f}s, from"
            f" {limit['last_ago']:.1f}s ago"
        )
    event = state.get("last_event")
    if event:
        lines.append(
            f"operator: its last {event.get('type')} event {event.get('reason')}"
            f" ({event.get('age', 0):.0f}s ago): {event.get('message')}"
        )
    if state.get("journal") is not None:
        recorded = state["journal"].get("recorded")
        lines.append(
            "operator: in its in-flight journal (CreateVolume may be running)"
            if recorded
            else "operator: not in its in-flight journal"
        )
    leases = state.get("leases")
    if leases:
        role = "a standby" if state.get("standby") else "leading"
        lines.append(
            f"operator: replica {state.get('identity')}, {role}, sees its Leases"
            f" {holders_text(leases)}"
        )
    return lines


def _call_text(call: Mapping[str, Any]) -> str:
    """`ControllerPublishVolume in flight for 12.3s (timeout 15s)`."""
    return (
        f"{call.get('rpc')} in flight for {float(call.get('for') or 0):.1f}s"
        f" (timeout {float(call.get('timeout') or 0):g}s)"
    )


# -- PersistentVolumeClaim --------------------------------------------------------------------


def _claim(walk: _Walk) -> Diagnosis:
    seen = walk.seen
    claim = seen.object
    phase = _status(claim).get("phase") or "Pending"
    walk.fact(f"claim {seen.target.namespace}/{seen.target.name}: phase {phase}")
    if phase == "Bound":
        return _bound_claim(walk)
    if phase == "Lost":
        raise walk.blocked(
            "claim-lost",
            f"the claim is Lost: its volume {_spec(claim).get('volumeName')} is gone",
            "restore the PersistentVolume, or delete the claim and make a new one",
        )
    storage_class = _storage_class(walk)
    provisioner = str(storage_class.get("provisioner") or "")
    _served(walk, provisioner, storage_class)
    node = _consumer(walk, storage_class)
    if node is not None:
        _node(walk, node, provisioner)
    _secrets(walk)
    _data_source(walk)
    _capacity(walk, storage_class, node)
    _volume_of_pending(walk)
    _provisioning_failures(walk)
    _operator_progress(walk)
    if _has_events_from_provisioner(seen):
        raise walk.progressing(
            "provisioning",
            f"waiting for {provisioner} to provision the volume; nothing wrong found yet",
            "look again in a few seconds; the claim's events say when provisioning starts and ends",
        )
    _unseen(walk, provisioner)


def _unseen(walk: _Walk, provisioner: str) -> NoReturn:
    """A pending claim its provisioner has posted nothing about: waiting for a worker, or held
    by one before its first event, or never seen; only the operator can tell which."""
    seen = walk.seen
    steps = ["look again in a few seconds; the claim's events say when provisioning starts"]
    if seen.operator is not None and not _known_to_operator(seen.operator):
        walk.fact(
            "operator: has not seen the claim (in none of its queues, no event about it,"
            " no CSI call for it)"
        )
        steps.insert(0, "the operator's log says whether it saw the claim (its informer, its"
                     " filters)")  # fmt: skip
    elif not seen.operator_error:
        steps.insert(
            0,
            f"ask the operator where the claim stands: kopf-csi explain {seen.target} --operator"
            " http://POD-IP:PORT (its --http-endpoint): its queue, its worker, its CSI call",
        )
    raise walk.progressing(
        "provisioning",
        f"waiting for {provisioner} to provision the volume: its provisioner has posted no event"
        " about this claim yet",
        *steps,
    )


def _known_to_operator(state: Mapping[str, Any]) -> bool:
    """Whether the operator's answer shows any trace of the object."""
    journal = state.get("journal") or {}
    return bool(
        state.get("queues") or state.get("calls") or state.get("last_event")
        or journal.get("recorded")
    )  # fmt: skip


def _storage_class(walk: _Walk) -> Body:
    seen = walk.seen
    name = seen.storage_class_name
    if "storageclass" in seen.unreadable:
        raise walk.blocked(
            "storageclass-unreadable",
            f"cannot read the StorageClass: {seen.unreadable['storageclass']}",
            "run explain with a user allowed to read StorageClasses (manifests/explain)",
        )
    if not name:
        raise walk.blocked(
            "storageclass-none",
            "the claim names no StorageClass and the cluster has no default one",
            "set spec.storageClassName on a new claim, or mark a class as the default"
            ' (storageclass.kubernetes.io/is-default-class: "true")',
        )
    storage_class = seen.storage_class
    if storage_class is None:
        raise walk.blocked(
            "storageclass-missing",
            f'StorageClass "{name}" not found',
            f'create StorageClass "{name}", or make a new claim with an existing class'
            " (spec.storageClassName cannot be changed)",
        )
    binding = storage_class.get("volumeBindingMode") or "Immediate"
    walk.fact(
        f"StorageClass {name}: provisioner {storage_class.get('provisioner')}, binding {binding}"
    )
    return storage_class


def _served(walk: _Walk, provisioner: str, storage_class: Mapping[str, Any]) -> None:
    """Whether an operator serves `provisioner` now: its Lease, its holder, its renewal; and,
    when no Lease is live, its provisioner's newest event.

    A Lease shows who serves the class only among operators run with `--leader-election`. One
    run without it (the Go sidecars' default) takes no Lease and shows only in its work, so a
    Lease free, expired or absent proves no more than "no operator with leader election serves
    it": the verdict says so, what the provisioner last did, and how to find an operator the
    Lease cannot show.
    """
    seen = walk.seen
    if seen.csi_driver is not None:
        walk.fact(f"CSIDriver {provisioner}: registered")
    elif "csidriver" not in seen.unreadable:
        walk.fact(f"CSIDriver {provisioner}: not registered (no CSIDriver object)")
    served = _served_by_operator(seen, provisioner)
    if served is True:
        walk.fact(f"operator: serves {provisioner}")
    elif served is False:
        others = ", ".join((seen.operator or {}).get("provisioners") or []) or "nothing"
        walk.fact(f"operator: serves {others}, not {provisioner}")
    if "leases" in seen.unreadable:
        walk.fact(f"Lease {seen.lease_name}: cannot be read ({seen.unreadable['leases']})")
        return
    live = False
    for lease in seen.leases:
        where = f"{_meta(lease).get('namespace')}/{_meta(lease).get('name')}"
        holder = _spec(lease).get("holderIdentity") or ""
        renewed_at, duration = _renewal(lease)
        age = _age(seen, renewed_at)
        if not holder:
            walk.fact(f"Lease {where}: held by nobody (released {_ago(age)})")
            continue
        renewed = lease_is_live(lease, seen.now)
        walk.fact(
            f"Lease {where}: held by {holder}, renewed {_ago(age)}"
            f" (valid for {duration:.0f}s{'' if renewed else ': expired'})"
        )
        live = live or renewed
    if not seen.leases:
        walk.fact(f"Lease {seen.lease_name}: none in any namespace")
    if live or served is True:
        return
    starting = (seen.operator or {}).get("starting")
    if starting:
        raise walk.progressing(
            "operator-starting",
            f"the operator asked is still starting ({starting}): it serves nothing yet",
            "wait for it to be ready (its /readyz); if it stays at one step, its log says why",
        )
    newest = _newest_provisioner_event(seen)
    walk.fact(_activity_line(seen, provisioner, newest))
    if newest is not None and _after_leases(seen, newest):
        return
    if not seen.leases and _waits_for_consumer(seen, storage_class):
        return  # nothing to provision before a node is selected: no event is due yet
    _unserved(walk, provisioner, newest)


def _unserved(walk: _Walk, provisioner: str, newest: Mapping[str, Any] | None) -> NoReturn:
    """The verdict when neither a live Lease nor newer work shows an operator serving the
    class: what is known (no operator with leader election serves it), what is not (whether
    one runs without it), and how to find out."""
    seen = walk.seen
    holder = next(
        (str(_spec(lease)["holderIdentity"]) for lease in seen.leases
         if _spec(lease).get("holderIdentity")),
        "",
    )  # fmt: skip
    if not seen.leases:
        blocker, lease = "provisioner-unserved", f"no Lease {seen.lease_name} in any namespace"
    elif holder:
        blocker = "lease-stale"
        lease = (
            f"the Lease is held by {holder}, which stopped renewing it (by this machine's clock)"
        )
    else:
        blocker, lease = "lease-free", "its Lease is held by nobody"
    if newest is not None:
        work = f"its provisioner's newest event is from {_ago(_age(seen, event_time(newest)))}"
        work += ", before the Lease's last renewal" if seen.leases else ""
    elif "provisioner-events" in seen.unreadable:
        work = "its provisioner's events cannot be read"
    else:
        work = "no event from its provisioner in any namespace"
    steps = []
    if _served_by_operator(seen, provisioner) is False and not seen.leases:
        # The operator asked serves other drivers, and nothing shows another: a class whose
        # provisioner is no driver's name (a typo) is likelier than a missing operator.
        steps.append(
            "check the class: its provisioner must be the name of a driver an operator serves"
            " (kubectl get csidrivers; the operator asked serves"
            f" {', '.join((seen.operator or {}).get('provisioners') or []) or 'nothing'})"
        )
    if holder:
        steps.append(
            f"check the replica {holder} (its pod, its logs); a standby takes the Lease over"
            " once it has seen it unrenewed for its duration"
        )
    elif seen.leases:
        steps.append("if replicas run with --leader-election, their logs say why none takes it")
    another = " another" if seen.operator is not None else ""
    steps += [
        "an operator run without --leader-election (the Go sidecars' default) takes no Lease:"
        f" look for its pods (kubectl get pods -A -l app.kubernetes.io/name=kopf-csi) and ask"
        f"{another} one where the claim stands: kopf-csi explain {seen.target} --operator"
        " http://POD-IP:PORT (its --http-endpoint)",
        f"if none runs, start the operator for {provisioner}",
    ]
    if not seen.leases and not steps[0].startswith("check the class"):
        steps.append(
            "or check the class: its provisioner must be the driver's name (kubectl get csidrivers)"
        )
    raise walk.blocked(
        blocker,
        f"no operator with leader election serves {provisioner}: {lease}; and nothing shows one"
        f" running without it: {work}",
        *steps,
    )


def lease_is_live(lease: Mapping[str, Any], now: datetime.datetime) -> bool:
    """Held, and renewed within its duration by this machine's clock."""
    if not _spec(lease).get("holderIdentity"):
        return False
    renewed_at, duration = _renewal(lease)
    moment = parse_microtime(renewed_at)
    return moment is not None and (now - moment).total_seconds() <= duration


def _renewal(lease: Mapping[str, Any]) -> tuple[str | None, float]:
    """A Lease's last renewal (its acquisition, if never renewed) and its duration, seconds."""
    spec = _spec(lease)
    renewed_at = spec.get("renewTime") or spec.get("acquireTime")
    return renewed_at, float(spec.get("leaseDurationSeconds") or 0)


def _newest_provisioner_event(seen: Observed) -> Body | None:
    """The provisioner's newest event seen: on the claim, or on any claim in the cluster (those
    are read only when no Lease is live)."""
    ours = [event for event in seen.events if event.get("reason") in _PROVISIONER_REASONS]
    if seen.provisioner_event is not None:
        ours.append(seen.provisioner_event)
    return max(ours, key=event_time) if ours else None


def _after_leases(seen: Observed, event: Mapping[str, Any]) -> bool:
    """Whether the event came a whole lease duration after every Lease's last renewal (or
    there is no Lease): then an operator works without `--leader-election`, beside a Lease
    left from before (released, or held by a replica that stopped, which stops working within
    its lease duration) or none, and the Lease says nothing of who serves the class."""
    moment = parse_microtime(event_time(event))
    if moment is None:
        return False
    for lease in seen.leases:
        renewed_at, duration = _renewal(lease)
        renewed = parse_microtime(renewed_at)
        if renewed is None or moment <= renewed + datetime.timedelta(seconds=duration):
            return False
    return True


def _activity_line(seen: Observed, provisioner: str, event: Mapping[str, Any] | None) -> str:
    """The provisioner's newest event as evidence, and what it shows of an operator."""
    if event is None:
        if "provisioner-events" in seen.unreadable:
            why = seen.unreadable["provisioner-events"]
            return f"provisioner {provisioner}: its events cannot be read ({why})"
        return (
            f"provisioner {provisioner}: no event from it in any namespace (the API server"
            " keeps events for an hour by default)"
        )
    involved = event.get("involvedObject") or {}
    ours = not involved or involved.get("uid") == _meta(seen.object).get("uid")
    on = "" if ours else f" on claim {involved.get('namespace')}/{involved.get('name')}"
    said = f"event {event.get('reason')}{on} ({_ago(_age(seen, event_time(event)))})"
    if not _after_leases(seen, event):
        return f"provisioner {provisioner}: its newest {said}"
    if seen.leases:
        return (
            f"{said} is newer than the Lease's last renewal: an operator serves {provisioner}"
            " without leader election"
        )
    return f"{said}, and no Lease: an operator serves {provisioner} without leader election"


def _served_by_operator(seen: Observed, provisioner: str) -> bool | None:
    if seen.operator is None or seen.operator.get("standby"):
        return None  # a standby serves nothing until it leads: the Lease tells who does
    provisioners = seen.operator.get("provisioners")
    if provisioners is None:
        return None
    return provisioner in provisioners


def _waits_for_consumer(seen: Observed, storage_class: Mapping[str, Any]) -> bool:
    selected = _annotations(seen.object).get(names.ANN_SELECTED_NODE)
    return storage_class.get("volumeBindingMode") == "WaitForFirstConsumer" and not selected


def _consumer(walk: _Walk, storage_class: Mapping[str, Any]) -> str | None:
    """The node the volume is for: WaitForFirstConsumer's selected node; None for Immediate."""
    seen = walk.seen
    selected = _annotations(seen.object).get(names.ANN_SELECTED_NODE)
    if storage_class.get("volumeBindingMode") != "WaitForFirstConsumer":
        return selected or None
    if selected:
        walk.fact(f"selected node: {selected} (annotation {names.ANN_SELECTED_NODE})")
        return str(selected)
    if not seen.pods:
        raise walk.blocked(
            "no-consumer",
            "waiting for a first consumer: no pod uses this claim"
            " (the class binds WaitForFirstConsumer)",
            "create a pod that mounts the claim; the scheduler then picks a node for it",
            "or use a class with volumeBindingMode Immediate",
        )
    for pod in seen.pods:
        node = _spec(pod).get("nodeName")
        walk.fact(f"pod {_meta(pod).get('name')}: uses the claim, node {node or '(none yet)'}")
    raise walk.blocked(
        "consumer-unscheduled",
        f"waiting for the scheduler: pod {_meta(seen.pods[0]).get('name')} uses the claim but no"
        " node has been selected for it",
        "kubectl describe pod: the scheduler's events say why no node fits",
    )


def _node(walk: _Walk, node: str, provisioner: str) -> None:
    seen = walk.seen
    if seen.node is None and "node" not in seen.unreadable:
        raise walk.blocked(
            "node-missing",
            f'the selected node "{node}" does not exist',
            "delete the pod so the scheduler picks another node (the provisioner then"
            " drops the annotation), or remove the selected-node annotation",
        )
    if seen.csinode is None:
        if "csinode" in seen.unreadable:
            return
        raise walk.blocked(
            "csinode-missing",
            f"the selected node {node} has no CSINode: "
            + names.MESSAGE_CSINODE_NOT_FOUND.format(node=node),
            f"check the kubelet on {node} and the driver's node plugin"
            " (node-driver-registrar) there",
        )
    drivers = [d for d in _spec(seen.csinode).get("drivers") or [] if d.get("name") == provisioner]
    if not drivers:
        raise walk.blocked(
            "csinode-without-driver",
            names.MESSAGE_CSINODE_WITHOUT_DRIVER.format(node=node, driver=provisioner),
            f"start the driver's node plugin on {node} (its node-driver-registrar registers it)",
        )
    keys = drivers[0].get("topologyKeys") or []
    walk.fact(f"CSINode {node}: driver {provisioner} registered, topology keys {keys}")


def _secrets(walk: _Walk) -> None:
    seen = walk.seen
    if seen.secret_error:
        raise walk.blocked(
            "secret-reference",
            f"the class's secret parameters are wrong: {seen.secret_error}",
            "fix the StorageClass's csi.storage.k8s.io/*-secret-* parameters (a new class)",
        )
    if "secrets" in seen.unreadable:
        walk.fact(f"provisioner secret: cannot be checked ({seen.unreadable['secrets']})")
        return
    for ref, exists in seen.secrets.items():
        if not exists:
            namespace, _, name = ref.partition("/")
            raise walk.blocked(
                "secret-missing",
                f"the provisioner secret {ref} does not exist:"
                f" {names.MESSAGE_SECRET_NOT_FOUND.format(name=name)}",
                f"create the secret {name} in namespace {namespace}",
            )
        walk.fact(f"provisioner secret {ref}: exists")


def _data_source(walk: _Walk) -> None:
    seen = walk.seen
    spec = _spec(seen.object)
    source = spec.get("dataSourceRef") or spec.get("dataSource")
    if not source:
        return
    kind, name = source.get("kind"), source.get("name")
    namespace = source.get("namespace") or seen.target.namespace
    what = f"{kind} {namespace}/{name}"
    if kind not in (names.KIND_PERSISTENT_VOLUME_CLAIM, names.KIND_VOLUME_SNAPSHOT):
        walk.fact(f"data source: {what} (a populator's: not ours to check)")
        return
    if seen.source is None:
        raise walk.blocked(
            "source-missing",
            f"the data source {what} does not exist",
            f"create {what}, or make a new claim without it",
        )
    if kind == names.KIND_PERSISTENT_VOLUME_CLAIM:
        phase = _status(seen.source).get("phase") or "Pending"
        if phase != "Bound":
            raise walk.blocked(
                "source-not-ready",
                f"the data source {what} is not Bound (phase {phase}): it cannot be cloned yet",
                f"explain pvc/{namespace}/{name}",
            )
        walk.fact(f"data source {what}: Bound")
        return
    status = _status(seen.source)
    if status.get("readyToUse") is not True:
        error = (status.get("error") or {}).get("message")
        raise walk.blocked(
            "source-not-ready",
            f"the data source {what} is not ready to use" + (f": {error}" if error else ""),
            f"explain vs/{namespace}/{name}",
        )
    walk.fact(f"data source {what}: ready to use")


def _capacity(walk: _Walk, storage_class: Mapping[str, Any], node: str | None) -> None:
    """CSIStorageCapacity for the class, on the selected node's topology (or anywhere)."""
    seen = walk.seen
    if seen.csi_driver is not None and not _spec(seen.csi_driver).get("storageCapacity"):
        return  # the scheduler does not check capacity for this driver, nor do we
    name = _meta(storage_class).get("name")
    mine = [c for c in seen.capacities if c.get("storageClassName") == name]
    if not mine:
        return
    labels = _meta(seen.node).get("labels") or {}
    if node is not None:
        mine = [c for c in mine if _matches(c.get("nodeTopology"), labels)]
    if not mine:
        return
    wanted = _requested(seen.object)
    best = max((_capacity_of(c) for c in mine), default=None)
    where = f"node {node}" if node else "any topology segment"
    if best is None or wanted is None:
        return
    room = f"{size(best)}, {size(wanted)} requested"
    walk.fact(f"capacity for class {name} on {where}: at most {room}")
    if best < wanted:
        raise walk.blocked(
            "capacity-exhausted",
            f"not enough capacity for class {name} on {where}: {room}",
            "free space on the storage, or let the pod go to a node with room",
            NEW_SMALLER_CLAIM,
        )


def _matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    if not selector:
        return True
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key, op, values = (
            expression.get("key"),
            expression.get("operator"),
            expression.get("values"),
        )
        present = key in labels
        if op == "In" and labels.get(key) not in (values or []):
            return False
        if op == "NotIn" and labels.get(key) in (values or []):
            return False
        if (op == "Exists") != present and op in ("Exists", "DoesNotExist"):
            return False
    return True


def _capacity_of(capacity: Mapping[str, Any]) -> int:
    for field in ("maximumVolumeSize", "capacity"):
        if capacity.get(field) is not None:
            return int(parse_quantity(str(capacity[field])))
    return 0


def _requested(claim: Mapping[str, Any]) -> int | None:
    value = ((_spec(claim).get("resources") or {}).get("requests") or {}).get("storage")
    return None if value is None else int(parse_quantity(str(value)))


def _volume_of_pending(walk: _Walk) -> None:
    seen = walk.seen
    if seen.volume is None:
        return
    name = _meta(seen.volume).get("name")
    phase = _status(seen.volume).get("phase")
    walk.fact(f"PersistentVolume {name}: made, phase {phase}")
    raise walk.progressing(
        "binding",
        f"the volume {name} is provisioned; waiting for the controller manager to bind the claim",
        "if this lasts, check kube-controller-manager (its persistentvolume-binder controller)",
    )


def _provisioning_failures(walk: _Walk) -> None:
    seen = walk.seen
    failures = _warnings(seen, names.REASON_PROVISIONING_FAILED)
    if not failures:
        return
    latest = failures[0]
    walk.fact(_event_line(seen, latest))
    message = str(latest.get("message") or "")
    code = grpc_code(message)
    if code in IN_PROGRESS_CODES:
        raise walk.blocked(
            "createvolume-transient",
            f"CreateVolume did not finish ({code}): the driver may still be working;"
            " retried with backoff",
            "check the CSI driver (its logs, its back end); a call that times out each time"
            " needs a longer --timeout or a healthier back end",
        )
    if code == "ResourceExhausted":
        wanted = _requested(seen.object)
        asked = f" ({size(wanted)} requested)" if wanted is not None else ""
        raise walk.blocked(
            "createvolume-exhausted",
            f"the driver is out of space{asked}: {message}",
            "free space on the back end",
            NEW_SMALLER_CLAIM,
        )
    if code is not None:
        raise walk.blocked(
            "createvolume-failed",
            f"the driver refused CreateVolume ({code}): {message}",
            "fix what the message names (the class's parameters, the claim's size or modes);"
            " retrying alone will not help",
        )
    if names.MESSAGE_NO_TOPOLOGY in message:
        driver = (seen.storage_class or {}).get("provisioner")
        raise walk.blocked(
            "no-topology",
            f"no node offers a topology for {driver}: {message}",
            "start the driver's node plugin (node-driver-registrar registers it): every CSINode"
            f" that lists {driver} names its topologyKeys (kubectl get csinodes -o yaml), and"
            " those nodes carry the keys as labels",
            "the claim is retried with backoff (up to --retry-interval-max) once a node has them",
        )
    raise walk.blocked(
        "provisioning-failed",
        f"provisioning failed: {message}",
        "fix what the message names; the operator retries with backoff",
    )


def _operator_progress(walk: _Walk, state: Mapping[str, Any] | None = None) -> None:
    """What the operator is doing about the object now (`state`: its endpoint's answer, the
    target's unless given), when it says so: a call in flight, a worker on it, its place."""
    if state is None:
        state = walk.seen.operator or {}
    _held_in_work(walk, state)
    calls = state.get("calls") or []
    if calls:
        raise walk.progressing(
            "in-flight",
            f"waiting for the driver: {_call_text(calls[0])}",
            "wait; a call longer than its timeout fails and is retried (the driver may still"
            " be working: check its logs if this repeats)",
        )
    role = _ROLES.get(walk.seen.target.kind)
    limit = (state.get("rate_limits") or {}).get(role or "")
    if limit and _throttled_now(limit):
        raise walk.progressing(
            "throttled",
            f"held by the operator's own API rate limit: its {role} requests wait up to"
            f" {limit['last_delay']:.1f}s for a turn (--kube-api-qps {limit['qps']:g},"
            f" --kube-api-burst {limit['burst']})",
            "wait, or raise --kube-api-qps and --kube-api-burst if the API server can take"
            " more (the requests go through in order meanwhile)",
        )
    queues = state.get("queues") or []
    queue = queues[0] if queues else None
    if not queue:
        return
    if queue.get("processing_for") is not None:
        raise walk.progressing(
            "in-flight",
            f"being worked on: the operator has been on it for {queue['processing_for']:.1f}s",
            "wait; a call longer than --timeout fails and is retried",
        )
    if queue.get("position") is not None:
        workers = queue.get("workers")
        why = (
            f": all {workers} of its workers are busy"
            if workers is not None and queue.get("busy") == workers
            else ""
        )
        raise walk.progressing(
            "queued",
            f"waiting its turn in the operator's {queue.get('queue')} queue:"
            f" {queue['position']} of {queue.get('depth')} queued{why}",
            f"wait; raise --worker-threads{f' (now {workers})' if workers else ''}"
            " if the queue stays long, or look at what keeps the workers busy"
            " (explain the keys ahead of it)",
        )


def _held_in_work(walk: _Walk, state: Mapping[str, Any]) -> None:
    """A worker on the object for longer than `in_work_after`: the first blocker, with what the
    operator says it waits on."""
    held = max(
        (float(q["processing_for"]) for q in state.get("queues") or []
         if q.get("processing_for") is not None),
        default=None,
    )  # fmt: skip
    if held is None or held <= walk.in_work_after:
        return
    calls = state.get("calls") or []
    if calls:
        rpc = calls[0].get("rpc")
        raise walk.blocked(
            "in-work",
            f"in work for {duration(held)}, waiting on {rpc}: in flight for"
            f" {duration(float(calls[0].get('for') or 0))}"
            f" (timeout {duration(float(calls[0].get('timeout') or 0))})",
            f"check the CSI driver (its logs, its back end): it has not answered {rpc}; the"
            " call fails at its timeout and is retried",
        )
    raise walk.blocked(
        "in-work",
        f"in work for {duration(held)}, waiting on {_waited_on(walk, state)}",
        "the operator's log for the object says what its worker did last; a worker held this"
        " long is one fewer for every other object (--worker-threads)",
    )


def _waited_on(walk: _Walk, state: Mapping[str, Any]) -> str:
    """What a worker with no CSI call in flight waits on, as far as the operator says."""
    role = _ROLES.get(walk.seen.target.kind)
    limit = (state.get("rate_limits") or {}).get(role or "")
    if limit and _throttled_now(limit):
        return (
            f"the operator's own API rate limit ({role}'s requests wait up to"
            f" {limit['last_delay']:.1f}s; --kube-api-qps {limit['qps']:g})"
        )
    if (state.get("journal") or {}).get("recorded"):
        return "an API request (no CSI call in flight; the claim is in the in-flight journal)"
    return "an API request (no CSI call in flight)"


def _throttled_now(limit: Mapping[str, Any]) -> bool:
    """A long wait for the rate limit that is going on, or ended a moment ago."""
    long = limit["last_delay"] >= THROTTLED_FOR
    return bool(long and limit["last_ago"] - limit["last_delay"] <= THROTTLED_WITHIN)


def _bound_claim(walk: _Walk) -> Diagnosis:
    seen = walk.seen
    name = _spec(seen.object).get("volumeName")
    walk.fact(f"PersistentVolume {name}: {_status(seen.volume).get('phase') or 'not found'}")
    if seen.volume is None:
        raise walk.blocked(
            "volume-missing",
            f"the claim is Bound to {name}, which does not exist",
            "restore the PersistentVolume; the claim becomes Lost otherwise",
        )
    _resize(walk, seen.object, seen.operator or {})
    _attachment_errors(walk)
    return walk.healthy(f"the claim is Bound to {name}")


def _resize(walk: _Walk, claim: Mapping[str, Any], state: Mapping[str, Any] | None) -> None:
    """Where an expansion stands (`allocatedResourceStatuses`); `state` is the operator's
    answer for the claim (None when the target is not the claim)."""
    seen = walk.seen
    statuses = _status(claim).get("allocatedResourceStatuses") or {}
    resize = statuses.get("storage")
    if resize is None:
        return
    walk.fact(f"resize: {resize}")
    error = _resize_error(seen, claim, resize)
    if resize in (names.RESIZE_CONTROLLER_INFEASIBLE, names.RESIZE_NODE_INFEASIBLE):
        raise walk.blocked(
            "expansion-infeasible",
            f"the expansion is infeasible ({resize}){f': {error}' if error else ''}",
            "lower spec.resources.requests.storage back to the size the volume has"
            " (recovery from a failed expansion), or fix what the driver says",
        )
    wanted = ((_spec(claim).get("resources") or {}).get("requests") or {}).get("storage")
    if resize == names.RESIZE_CONTROLLER_IN_PROGRESS:
        if state is not None:
            _operator_progress(walk, state)
        if error:
            raise walk.blocked(
                "expansion-failing",
                f"expanding the volume to {wanted} fails: {error}",
                "fix what the message names; the resizer retries with backoff",
            )
        if seen.target.kind == "persistentvolumeclaim":
            retried = _warnings(seen, names.REASON_VOLUME_RESIZE_FAILED)
            if retried:  # a failure the resizer retries (a timeout): no condition
                walk.fact(_event_line(seen, retried[0]))
        raise walk.progressing(
            "expanding",
            f"being expanded to {wanted}: the driver has not finished ControllerExpandVolume",
            "look again in a few seconds; the claim's events say when it ends",
        )
    if resize in (names.RESIZE_NODE_PENDING, names.RESIZE_NODE_IN_PROGRESS):
        raise walk.progressing(
            "node-expansion",
            f"the volume is expanded to {wanted}; the node must now grow its file system"
            " (kubelet does it for a pod that uses the claim)",
            "start a pod that uses the claim, or restart the one that does",
        )


def _resize_error(seen: Observed, claim: Mapping[str, Any], resize: str) -> str | None:
    """The resize error: the claim's condition (kept while it lasts), else its newest event."""
    wanted = (
        names.CONDITION_NODE_RESIZE_ERROR
        if resize.startswith("Node")
        else names.CONDITION_CONTROLLER_RESIZE_ERROR
    )
    for condition in _status(claim).get("conditions") or []:
        if condition.get("type") == wanted and condition.get("message"):
            return str(condition["message"])
    if seen.target.kind != "persistentvolumeclaim":
        return None  # the events read are the target's, not the claim's
    errors = _warnings(seen, names.REASON_VOLUME_RESIZE_FAILED)
    return str(errors[0].get("message")) if errors and resize.endswith("Infeasible") else None


def _attachment_errors(walk: _Walk) -> None:
    for va in walk.seen.attachments:
        name = _meta(va).get("name")
        node = _spec(va).get("nodeName")
        status = _status(va)
        error = (status.get("attachError") or {}).get("message")
        walk.fact(f"VolumeAttachment {name}: node {node}, attached {bool(status.get('attached'))}")
        if error:
            raise walk.blocked(
                "attach-failed",
                f"attaching to node {node} fails: {error}",
                f"explain va/{name}; check the driver's ControllerPublishVolume for {node}",
            )


# -- PersistentVolume ------------------------------------------------------------------------


def _volume(walk: _Walk) -> Diagnosis:
    seen = walk.seen
    volume = seen.object
    name = seen.target.name
    phase = _status(volume).get("phase") or "Pending"
    policy = _spec(volume).get("persistentVolumeReclaimPolicy") or "Retain"
    claim_ref = _spec(volume).get("claimRef") or {}
    walk.fact(f"PersistentVolume {name}: phase {phase}, reclaim policy {policy}")
    if claim_ref:
        walk.fact(f"claim: {claim_ref.get('namespace')}/{claim_ref.get('name')}")
    if _meta(volume).get("deletionTimestamp"):
        return _deleting_volume(walk)
    if phase == "Released" and policy == "Delete":
        failures = _warnings(seen, names.REASON_VOLUME_FAILED_DELETE)
        _attached_volume(walk)
        if failures:
            walk.fact(_event_line(seen, failures[0]))
            raise walk.blocked(
                "delete-failed",
                f"deleting the volume fails: {failures[0].get('message')}",
                "fix what the message names; the operator retries with backoff",
            )
        _operator_progress(walk)
        raise walk.progressing("deleting", "released; waiting for the provisioner to delete it")
    if phase == "Failed":
        raise walk.blocked(
            "volume-failed",
            f"the volume is Failed: {_status(volume).get('message') or 'no message'}",
            "read the message; a Failed volume needs an administrator",
        )
    if phase == "Released":
        return walk.healthy("released and kept: the reclaim policy is Retain")
    if seen.claim is not None:
        _resize(walk, seen.claim, None)
    _attachment_errors(walk)
    return walk.healthy(f"the volume is {phase}")


def _attached_volume(walk: _Walk) -> None:
    seen = walk.seen
    for va in seen.attachments:
        name, node = _meta(va).get("name"), _spec(va).get("nodeName")
        detaching = bool(_meta(va).get("deletionTimestamp"))
        walk.fact(
            f"VolumeAttachment {name}: node {node}, attached {_status(va).get('attached')}"
            + (", being deleted" if detaching else "")
        )
        error = (_status(va).get("detachError") or {}).get("message")
        if error:
            walk.fact(f"VolumeAttachment {name}: detaching fails: {error}")
            step = (
                f"explain va/{name}: detaching it fails; once it is detached and gone, the volume"
                " is deleted"
            )
        elif detaching:
            step = f"explain va/{name}: it is being detached; the volume is deleted after it"
        else:
            step = (
                f"stop the pods on {node} that use the volume; the attach/detach controller"
                " then detaches it"
            )
        raise walk.blocked(
            "still-attached",
            f"the deletion waits for VolumeAttachment {name}: "
            + names.MESSAGE_STILL_ATTACHED.format(volume=seen.target.name, node=node),
            step,
        )


def _deleting_volume(walk: _Walk) -> Diagnosis:
    seen = walk.seen
    finalizers = list(_meta(seen.object).get("finalizers") or [])
    walk.fact(f"being deleted; finalizers: {', '.join(finalizers) or 'none'}")
    _attached_volume(walk)
    ours = {names.FINALIZER_PV, *PROTECTION_FINALIZERS}
    foreign = [
        f for f in finalizers if f not in ours and not f.startswith(names.FINALIZER_ATTACHER_PREFIX)
    ]
    if foreign:
        raise walk.blocked(
            "foreign-finalizer",
            f"the deletion waits for another controller's finalizer: {', '.join(foreign)}",
            "find the controller that owns it and let it finish; remove the finalizer by hand"
            " only if that controller is gone for good",
        )
    failures = _warnings(seen, names.REASON_VOLUME_FAILED_DELETE)
    if failures:
        walk.fact(_event_line(seen, failures[0]))
        raise walk.blocked(
            "delete-failed",
            f"deleting the volume fails: {failures[0].get('message')}",
            "fix what the message names; the operator retries with backoff",
        )
    if "kubernetes.io/pv-protection" in finalizers and _status(seen.object).get("phase") == "Bound":
        raise walk.blocked(
            "in-use",
            "the deletion waits for the claim: the volume is still Bound",
            "delete the claim (and the pods using it) first",
        )
    _operator_progress(walk)
    raise walk.progressing("deleting", "being deleted; nothing holds it back")


# -- VolumeAttachment ------------------------------------------------------------------------


def _attachment(walk: _Walk) -> Diagnosis:
    seen = walk.seen
    va = seen.object
    spec, status = _spec(va), _status(va)
    volume = (spec.get("source") or {}).get("persistentVolumeName")
    walk.fact(
        f"VolumeAttachment {seen.target.name}: attacher {spec.get('attacher')}, volume {volume},"
        f" node {spec.get('nodeName')}, attached {bool(status.get('attached'))}"
    )
    deleting = bool(_meta(va).get("deletionTimestamp"))
    error = (status.get("detachError" if deleting else "attachError") or {}).get("message")
    if error:
        action = "detaching from" if deleting else "attaching to"
        raise walk.blocked(
            "detach-failed" if deleting else "attach-failed",
            f"{action} node {spec.get('nodeName')} fails: {error}",
            "fix what the message names (the driver's ControllerPublishVolume /"
            " ControllerUnpublishVolume); the attacher retries with backoff",
        )
    if seen.volume is None and volume:
        raise walk.blocked(
            "volume-missing",
            names.MESSAGE_PV_NOT_FOUND.format(volume=volume),
            "the attachment's volume is gone: the attach/detach controller deletes it",
        )
    if deleting:
        raise walk.progressing("detaching", "being detached")
    if status.get("attached"):
        return walk.healthy(f"attached to node {spec.get('nodeName')}")
    _operator_progress(walk)
    raise walk.progressing("attaching", "not attached yet; the attacher has reported no error")


# -- VolumeSnapshot, VolumeSnapshotContent, VolumeGroupSnapshot --------------------------------


def _snapshot_like(walk: _Walk, what: str, content_kind: str) -> Diagnosis:
    seen = walk.seen
    status = _status(seen.object)
    bound = status.get("boundVolumeSnapshotContentName") or status.get(
        "boundVolumeGroupSnapshotContentName"
    )
    walk.fact(
        f"{what} {seen.target.namespace}/{seen.target.name}: readyToUse"
        f" {status.get('readyToUse')}, {content_kind} {bound or '(none bound yet)'}"
    )
    error = (status.get("error") or {}).get("message")
    if error:
        raise walk.blocked(
            "snapshot-error", f"the {what} failed: {error}", "fix what the message names"
        )
    if status.get("readyToUse") is True:
        return walk.healthy(f"the {what} is ready to use")
    if not bound:
        if seen.target.kind == "volumesnapshot":
            _snapshot_source(walk)
        raise walk.progressing(
            "unbound",
            f"no {content_kind} is bound yet",
            "check the snapshot-controller (it makes the content) and the class",
        )
    if seen.content is None:
        raise walk.blocked(
            "content-missing", f"its {content_kind} {bound} does not exist", "check the class"
        )
    return _content(walk, seen.content, content_kind, seen.content_operator)


def _snapshot_source(walk: _Walk) -> None:
    """What the snapshot-controller needs before it makes a dynamic snapshot's content: the
    source claim Bound, and a class: the one named, or the single default one of the source
    volume's driver (`snapshot.storage.kubernetes.io/is-default-class`)."""
    seen = walk.seen
    spec = _spec(seen.object)
    claim = (spec.get("source") or {}).get("persistentVolumeClaimName")
    if not claim:
        return  # pre-provisioned: the user names the content
    where = f"{seen.target.namespace}/{claim}"
    if seen.source is None and "source" not in seen.unreadable:
        raise walk.blocked(
            "source-missing",
            f"the source claim {where} does not exist",
            "make a new VolumeSnapshot of an existing claim (its source cannot be changed)",
        )
    if "snapshotclasses" in seen.unreadable:
        walk.fact(f"VolumeSnapshotClasses: cannot be read ({seen.unreadable['snapshotclasses']})")
        return
    named = spec.get("volumeSnapshotClassName")
    if named:
        found = [c for c in seen.snapshot_classes if _meta(c).get("name") == named]
        if not found:
            raise walk.blocked(
                "snapshotclass-missing",
                f'VolumeSnapshotClass "{named}" not found',
                f'create VolumeSnapshotClass "{named}", or make a new VolumeSnapshot with an'
                " existing class",
            )
        walk.fact(f"VolumeSnapshotClass {named}: driver {found[0].get('driver')}")
        return
    driver = (_spec(seen.volume).get("csi") or {}).get("driver")
    if seen.source is not None and _status(seen.source).get("phase") != "Bound":
        raise walk.progressing(
            "source-not-bound",
            f"the source claim {where} is not Bound yet: the snapshot-controller waits for it"
            " (its volume's driver chooses the default class)",
            f"explain pvc/{where}",
        )
    if not driver:
        return  # the claim's volume is not a CSI one, or unreadable: nothing to say of a default
    walk.fact(f"source claim {where}: Bound, driver {driver}")
    _default_snapshot_class(walk, str(driver))


def _default_snapshot_class(walk: _Walk, driver: str) -> None:
    """A snapshot that names no class gets its driver's only default class, or none."""
    classes = [c for c in walk.seen.snapshot_classes if c.get("driver") == driver]
    defaults = [
        str(_meta(c).get("name"))
        for c in classes
        if _annotations(c).get(names.ANN_SNAPSHOT_DEFAULT_CLASS) == "true"
    ]
    if len(defaults) == 1:
        walk.fact(f"VolumeSnapshotClass: none named; {defaults[0]} is the default for {driver}")
        return
    mark = f'{names.ANN_SNAPSHOT_DEFAULT_CLASS}: "true"'
    if defaults:
        raise walk.blocked(
            "snapshotclass-ambiguous",
            f"the snapshot names no VolumeSnapshotClass and {driver} has {len(defaults)}"
            f" default ones ({', '.join(sorted(defaults))}): the snapshot-controller picks none",
            f"leave one of them the default ({mark}), or name one in the snapshot's"
            " spec.volumeSnapshotClassName",
        )
    others = ", ".join(sorted(str(_meta(c).get("name")) for c in classes))
    walk.fact(f"VolumeSnapshotClasses of {driver}: {others or 'none'}")
    raise walk.blocked(
        "snapshotclass-none",
        f"the snapshot names no VolumeSnapshotClass and {driver} has no default one",
        f"name a class in the snapshot's spec.volumeSnapshotClassName, or mark one of {driver}'s"
        f" classes as its default ({mark})"
        if classes
        else f"create a VolumeSnapshotClass with driver {driver}, marked as its default ({mark}),"
        " or named in the snapshot's spec.volumeSnapshotClassName",
    )


def _content(
    walk: _Walk,
    content: Mapping[str, Any],
    what: str,
    state: Mapping[str, Any] | None = None,
) -> Diagnosis:
    """A snapshot content; `state` is the operator's answer for it when it is not the target."""
    name = _meta(content).get("name")
    status = _status(content)
    walk.fact(
        f"{what} {name}: readyToUse {status.get('readyToUse')},"
        f" handle {status.get('snapshotHandle') or status.get('volumeGroupSnapshotHandle')}"
    )
    error = (status.get("error") or {}).get("message")
    if error:
        raise walk.blocked(
            "content-error", f"the {what} {name} failed: {error}", "fix what the message names"
        )
    if status.get("readyToUse") is True:
        return walk.healthy(f"the {what} {name} is ready to use")
    creating = names.ANN_SNAPSHOT_BEING_CREATED in _annotations(content)
    if state is not None:
        for call in state.get("calls") or []:
            walk.fact(f"operator: for {what} {name}: {_call_text(call)}")
    _operator_progress(walk, state)
    if creating:
        raise walk.blocked(
            "content-creating",
            f"the {what} {name} is stuck being created: the driver has not answered"
            " CreateSnapshot with a ready snapshot",
            "check the CSI driver (its logs, its back end); the snapshotter retries",
        )
    raise walk.progressing(
        "content-pending", f"the {what} {name} is not ready yet", "look again in a few seconds"
    )


def _vs(walk: _Walk) -> Diagnosis:
    return _snapshot_like(walk, "VolumeSnapshot", "VolumeSnapshotContent")


def _vsc(walk: _Walk) -> Diagnosis:
    return _content(walk, walk.seen.object, "VolumeSnapshotContent")


def _vgs(walk: _Walk) -> Diagnosis:
    return _snapshot_like(walk, "VolumeGroupSnapshot", "VolumeGroupSnapshotContent")


_CHAINS: Mapping[str, Callable[[_Walk], Diagnosis]] = {
    "persistentvolumeclaim": _claim,
    "persistentvolume": _volume,
    "volumeattachment": _attachment,
    "volumesnapshot": _vs,
    "volumesnapshotcontent": _vsc,
    "volumegroupsnapshot": _vgs,
}


def secret_free(parameters: Mapping[str, str] | None) -> dict[str, str]:
    """A class's parameters without those that name or hold a secret."""
    return {k: v for k, v in (parameters or {}).items() if not is_secret_parameter(k)}
