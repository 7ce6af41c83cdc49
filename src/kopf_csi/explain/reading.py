"""The reading: every object a target's chain depends on, through `kopf_csi.kube`, read-only.

Only GET and LIST requests (the ClusterRole in manifests/explain grants nothing else). A Secret
is read as metadata alone (`KubeClient.get_metadata`): its data never reaches explain. What the
API refuses or fails to give for a related object is noted in `Observed.unreadable` and the
rules say so; only the target itself must be readable, or explain cannot work (`ExplainError`).
"""

from __future__ import annotations

import datetime
import html
import json
import pathlib
import re
import urllib.parse
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import aiohttp

from kopf_csi import kube, names
from kopf_csi.explain import rules
from kopf_csi.explain.observed import Body, ExplainError, Observed
from kopf_csi.provisioning import secrets as secret_refs
from kopf_csi.targets import Target

__all__ = ["PODS", "RESOURCES", "ExplainError", "connect", "read", "read_operator"]

PODS = kube.Resource("", "v1", "pods", namespaced=True)
RESOURCES: dict[str, kube.Resource] = {
    "persistentvolumeclaim": kube.CLAIMS,
    "persistentvolume": kube.VOLUMES,
    "volumeattachment": kube.VOLUME_ATTACHMENTS,
    "volumesnapshot": kube.SNAPSHOTS,
    "volumesnapshotcontent": kube.SNAPSHOT_CONTENTS,
    "volumegroupsnapshot": kube.GROUP_SNAPSHOTS,
}
DEFAULT_CLASS_ANNOTATIONS = (
    "storageclass.kubernetes.io/is-default-class",
    "storageclass.beta.kubernetes.io/is-default-class",
)
OPERATOR_TIMEOUT = 2.0
"""Seconds the operator's debug endpoint gets to answer: explain must answer in under two."""

_T = TypeVar("_T")
API_ERRORS = (kube.KubeError,)
"""What a read of the API may raise (no answer at all included: `kube.UnavailableError`)."""


def kubeconfig_path(given: str | None, env: dict[str, str]) -> pathlib.Path | None:
    """kubectl's choice: `--kubeconfig`, else `$KUBECONFIG`'s first file, else ~/.kube/config;
    None (in-cluster) when none of them exists."""
    if given:
        path = pathlib.Path(given).expanduser()
        if not path.is_file():
            raise ExplainError(f"the kubeconfig {given} does not exist (or is not a file)")
        return path
    for candidate in (env.get("KUBECONFIG") or "").split(":"):
        if candidate and pathlib.Path(candidate).expanduser().is_file():
            return pathlib.Path(candidate).expanduser()
    default = pathlib.Path("~/.kube/config").expanduser()
    if default.is_file():
        return default
    if not env.get("KUBERNETES_SERVICE_HOST"):
        raise ExplainError(
            "no kubeconfig: give --kubeconfig, set KUBECONFIG or write ~/.kube/config"
        )
    return None  # in a pod: its service account


async def connect(kubeconfig: pathlib.Path | None, context: str | None) -> kube.KubeClient:
    try:
        return await kube.KubeClient.connect(kubeconfig, context=context)
    except kube.LoginError as exc:
        raise ExplainError(_login_error(str(exc), kubeconfig, context)) from None


def _login_error(message: str, kubeconfig: pathlib.Path | None, context: str | None) -> str:
    """The line for a failed login; for a `--context` the kubeconfig lacks, ours with the way to
    list those it has (the client library says only "Expected object with name X in ...
    contexts list")."""
    if not context or f"Expected object with name {context} in" not in message:
        return message
    where = f"the kubeconfig {kubeconfig}" if kubeconfig else "the kubeconfig"
    listing = "kubectl config get-contexts" + (f" --kubeconfig {kubeconfig}" if kubeconfig else "")
    return (
        f'{where} has no context "{context}": `{listing}` lists those it has; leave --context'
        " out for its current one"
    )


async def read(api: kube.KubeClient, target: Target, *, server: str = "") -> Observed:
    """Read the target and what its chain depends on."""
    resource = RESOURCES[target.kind]
    try:
        obj = await api.get(resource, target.name, target.namespace)
    except kube.UnavailableError as exc:
        where = f" at {server}" if server else ""
        raise ExplainError(f"cannot reach the Kubernetes API{where}: {exc.message}") from None
    except kube.KubeError as exc:
        raise ExplainError(f"cannot read {target}: {exc}") from None
    if obj is None:
        where = f' in namespace "{target.namespace}"' if target.namespace else ""
        raise ExplainError(f'{target.kind} "{target.name}" not found{where}')
    seen = Observed(target=target, now=datetime.datetime.now(datetime.UTC), object=obj)
    reader = _Reader(api, seen)
    await _READERS[target.kind](reader)
    seen.events = await reader.attempt("events", _events(api, obj), [])
    return seen


class _Reader:
    def __init__(self, api: kube.KubeClient, seen: Observed) -> None:
        self.api = api
        self.seen = seen

    async def attempt(self, what: str, call: Awaitable[_T], default: _T) -> _T:
        """The result of one read; `default` (and a note in `unreadable`) when it fails."""
        try:
            return await call
        except API_ERRORS as exc:
            self.seen.unreadable[what] = str(exc) or type(exc).__name__
            return default

    async def get(
        self, what: str, resource: kube.Resource, name: str, ns: str | None = None
    ) -> Body | None:
        return await self.attempt(what, self.api.get(resource, name, ns), None)


async def _events(api: kube.KubeClient, obj: Body) -> list[Body]:
    uid = (obj.get("metadata") or {}).get("uid")
    if not uid:
        return []
    return await api.list(kube.EVENTS, field_selector=f"involvedObject.uid={uid}")


async def _newest_provisioner_event(api: kube.KubeClient, provisioner: str) -> Body | None:
    """The newest `Provisioning` event from `provisioner`'s provisioner, in any namespace.

    One LIST, read a page at a time, of events bounded by their time to live (an hour by
    default) and aggregated per claim (a repeat bumps `lastTimestamp`): every provisioning
    attempt, ours or a Go sidecar's, begins with one. The provisioner is told by the event's
    source, `<driver>_<host>_<uuid>` (`names.LIBRARY_EVENT_COMPONENT`).
    """
    newest: Body | None = None
    selector = f"reason={names.REASON_PROVISIONING}"
    async for page in api.pages(kube.EVENTS, field_selector=selector):
        ours = [event for event in page if _is_provisioners_event(event, provisioner)]
        newest = max([*ours, *([newest] if newest else [])], key=rules.event_time, default=None)
    return newest


def _is_provisioners_event(event: Body, provisioner: str) -> bool:
    """Whether `provisioner`'s provisioner posted the event (its source component)."""
    components = (
        (event.get("source") or {}).get("component"),
        event.get("reportingComponent"),
        event.get("reportingController"),
    )
    return any(str(c or "").startswith(f"{provisioner}_") for c in components)


# -- PersistentVolumeClaim --------------------------------------------------------------------


async def _claim(reader: _Reader) -> None:
    seen, api = reader.seen, reader.api
    claim = seen.object
    spec = claim.get("spec") or {}
    namespace = seen.target.namespace
    volume_name = spec.get("volumeName")
    if volume_name:
        seen.volume = await reader.get("volume", kube.VOLUMES, volume_name)
    else:
        uid = (claim.get("metadata") or {}).get("uid")
        seen.volume = await reader.get("volume", kube.VOLUMES, f"pvc-{uid}")
    if seen.volume is not None:
        seen.attachments = await _attachments(reader, seen.volume)
    if (claim.get("status") or {}).get("phase") == "Bound":
        return
    class_name = spec.get("storageClassName")
    if class_name is None:
        class_name = (
            (claim.get("metadata") or {}).get("annotations", {}).get(names.ANN_BETA_STORAGE_CLASS)
        )
    if class_name is None:
        classes = await reader.attempt("storageclass", api.list(kube.STORAGE_CLASSES), [])
        defaults = [sc for sc in classes if _is_default(sc)]
        seen.storage_class = defaults[-1] if defaults else None
        class_name = (seen.storage_class or {}).get("metadata", {}).get("name")
    elif class_name:
        seen.storage_class = await reader.get("storageclass", kube.STORAGE_CLASSES, class_name)
    seen.storage_class_name = class_name or None
    if seen.storage_class is None:
        return
    provisioner = str(seen.storage_class.get("provisioner") or "")
    seen.csi_driver = await reader.get("csidriver", kube.CSIDRIVERS, provisioner)
    seen.lease_name = names.lease_name(names.LEASE_PREFIX_PROVISIONER, provisioner)
    selector = f"metadata.name={seen.lease_name}"
    seen.leases = await reader.attempt("leases", api.list(kube.LEASES, field_selector=selector), [])
    if not any(rules.lease_is_live(lease, seen.now) for lease in seen.leases):
        seen.provisioner_event = await reader.attempt(
            "provisioner-events", _newest_provisioner_event(api, provisioner), None
        )
    node = (claim.get("metadata") or {}).get("annotations", {}).get(names.ANN_SELECTED_NODE)
    if node:
        seen.node = await reader.get("node", kube.NODES, node)
        seen.csinode = await reader.get("csinode", kube.CSINODES, node)
    else:
        pods = await reader.attempt("pods", api.list(PODS, namespace), [])
        seen.pods = [pod for pod in pods if _uses(pod, seen.target.name)]
    await _secrets(reader)
    source = spec.get("dataSourceRef") or spec.get("dataSource")
    if source:
        source_ns = source.get("namespace") or namespace
        resource = {
            names.KIND_PERSISTENT_VOLUME_CLAIM: kube.CLAIMS,
            names.KIND_VOLUME_SNAPSHOT: kube.SNAPSHOTS,
        }.get(source.get("kind"))
        if resource is not None:
            seen.source = await reader.get("source", resource, source.get("name"), source_ns)
    if (seen.csi_driver or {}).get("spec", {}).get("storageCapacity"):
        seen.capacities = await reader.attempt(
            "capacity", api.list(kube.CSI_STORAGE_CAPACITIES), []
        )


def _is_default(storage_class: Body) -> bool:
    annotations = (storage_class.get("metadata") or {}).get("annotations") or {}
    return any(annotations.get(key) == "true" for key in DEFAULT_CLASS_ANNOTATIONS)


def _uses(pod: Body, claim: str) -> bool:
    volumes = (pod.get("spec") or {}).get("volumes") or []
    return any((v.get("persistentVolumeClaim") or {}).get("claimName") == claim for v in volumes)


async def _secrets(reader: _Reader) -> None:
    """Whether the class's provisioner secret exists (its metadata only, never its data)."""
    seen = reader.seen
    assert seen.storage_class is not None
    claim = seen.object
    uid = (claim.get("metadata") or {}).get("uid")
    try:
        ref = secret_refs.secret_reference(
            secret_refs.PROVISIONER,
            seen.storage_class.get("parameters"),
            volume_name=f"pvc-{uid}",
            claim=claim,
        )
    except secret_refs.SecretReferenceError as exc:
        seen.secret_error = str(exc)
        return
    if ref is None:
        return
    try:
        found = await reader.api.get_metadata(kube.SECRETS, ref.name, ref.namespace)
    except API_ERRORS as exc:
        seen.unreadable["secrets"] = str(exc) or type(exc).__name__
        return
    seen.secrets[f"{ref.namespace}/{ref.name}"] = found is not None


async def _attachments(reader: _Reader, volume: Body) -> list[Body]:
    name = (volume.get("metadata") or {}).get("name")
    every = await reader.attempt("attachments", reader.api.list(kube.VOLUME_ATTACHMENTS), [])
    return [
        va
        for va in every
        if ((va.get("spec") or {}).get("source") or {}).get("persistentVolumeName") == name
    ]


# -- the other kinds -------------------------------------------------------------------------


async def _volume(reader: _Reader) -> None:
    seen = reader.seen
    seen.attachments = await _attachments(reader, seen.object)
    ref = (seen.object.get("spec") or {}).get("claimRef") or {}
    if ref.get("name") and ref.get("namespace"):
        seen.claim = await reader.get("claim", kube.CLAIMS, ref["name"], ref["namespace"])


async def _attachment(reader: _Reader) -> None:
    seen = reader.seen
    volume = ((seen.object.get("spec") or {}).get("source") or {}).get("persistentVolumeName")
    if volume:
        seen.volume = await reader.get("volume", kube.VOLUMES, volume)


async def _snapshot(reader: _Reader) -> None:
    seen, api = reader.seen, reader.api
    status = seen.object.get("status") or {}
    bound = status.get("boundVolumeSnapshotContentName")
    if bound:
        seen.content = await reader.get("content", kube.SNAPSHOT_CONTENTS, bound)
        return
    # Unbound: what the snapshot-controller needs to make the content. Its class (named, or
    # the default of the source volume's driver) and that source: the claim, then its PV.
    claim = ((seen.object.get("spec") or {}).get("source") or {}).get("persistentVolumeClaimName")
    if not claim:
        return  # pre-provisioned: the user names the content
    seen.snapshot_classes = await reader.attempt(
        "snapshotclasses", api.list(kube.SNAPSHOT_CLASSES), []
    )
    seen.source = await reader.get("source", kube.CLAIMS, claim, seen.target.namespace)
    volume = ((seen.source or {}).get("spec") or {}).get("volumeName")
    if volume:
        seen.volume = await reader.get("volume", kube.VOLUMES, volume)


async def _group_snapshot(reader: _Reader) -> None:
    status = reader.seen.object.get("status") or {}
    bound = status.get("boundVolumeGroupSnapshotContentName")
    if bound:
        reader.seen.content = await reader.get("content", kube.GROUP_SNAPSHOT_CONTENTS, bound)


async def _nothing_more(_: _Reader) -> None:
    return None


_READERS: dict[str, Callable[[_Reader], Awaitable[None]]] = {
    "persistentvolumeclaim": _claim,
    "persistentvolume": _volume,
    "volumeattachment": _attachment,
    "volumesnapshot": _snapshot,
    "volumesnapshotcontent": _nothing_more,
    "volumegroupsnapshot": _group_snapshot,
}


# -- the operator's debug endpoint ----------------------------------------------------------


async def read_operator(seen: Observed, url: str) -> None:
    """Add the operator's knowledge of the target (`/debug/objects/...`), or why there is none;
    for a VolumeSnapshot, of its bound content too (the snapshotter works on the content)."""
    target = seen.target
    uid = (seen.object.get("metadata") or {}).get("uid")
    timeout = aiohttp.ClientTimeout(total=OPERATOR_TIMEOUT)
    try:
        async with aiohttp.ClientSession(timeout=timeout) as session:
            answer, seen.operator_error = await _object_state(
                session, url, target.kind, target.namespace, target.name, uid
            )
            seen.operator = answer
            if answer is not None and target.kind == "volumesnapshot" and seen.content:
                meta = seen.content.get("metadata") or {}
                name, content_uid = str(meta.get("name") or ""), meta.get("uid")
                seen.content_operator, _ = await _object_state(
                    session, url, "volumesnapshotcontent", None, name, content_uid
                )
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        seen.operator_error = f"not reachable ({url}: {exc or type(exc).__name__})"


async def _object_state(
    session: aiohttp.ClientSession,
    url: str,
    kind: str,
    namespace: str | None,
    name: str,
    uid: str | None,
) -> tuple[Body | None, str | None]:
    """The endpoint's answer for one object, or why there is none."""
    parts = [kind, *([namespace] if namespace else []), name]
    path = "/debug/objects/" + "/".join(urllib.parse.quote(part, safe="") for part in parts)
    if uid:
        path += f"?uid={urllib.parse.quote(str(uid), safe='')}"
    async with session.get(url.rstrip("/") + path) as response:
        text = await response.text(errors="replace")
        status, reason = response.status, response.reason or ""
    try:
        answer: Any = json.loads(text)
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        return None, foreign_answer(url, status, reason, text)
    if status != 200:
        return None, f"{url} answered {status}: {answer.get('error') or excerpt(text)}"
    return answer, None


NOT_THE_ENDPOINT = (
    "not kopf-csi's endpoint: --operator takes the operator's --http-endpoint"
    " (http://POD-IP:PORT, the port its --http-endpoint flag names), which answers JSON"
)


def foreign_answer(url: str, status: int, reason: str, text: str) -> str:
    """What answered at `url` when it was not the operator's endpoint (no JSON object): its
    status and a short, clean excerpt (an HTML page's text, not its markup), and the hint."""
    said = excerpt(text)
    quoted = f': "{said}"' if said else ""
    return f"{url} answered {status} {reason}".rstrip() + f"{quoted}; {NOT_THE_ENDPOINT}"


EXCERPT_LENGTH = 60


def excerpt(text: str, length: int = EXCERPT_LENGTH) -> str:
    """A body's text in one short line: markup and runs of white space gone, cut at a word
    (with `...`) rather than mid-word."""
    plain = " ".join(_TAGS.sub(" ", html.unescape(text)).split())
    if len(plain) <= length:
        return plain
    cut = plain[:length].rsplit(" ", 1)[0] if " " in plain[:length] else plain[:length]
    return cut.rstrip(" .,;:") + "..."


_TAGS = re.compile(r"<[^>]*>")
