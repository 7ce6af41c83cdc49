"""A whole stream migrated (`migrate`) or migrated back (`back`).

`migrate` rewrites each workload that holds Go sidecars (`rendering.rewrite`) and leaves every
other document's text as it was, byte for byte; then it appends the RBAC the workloads'
ServiceAccounts lack (`rbac.missing`), labelled `app.kubernetes.io/managed-by:
kopf-csi-migrate`. A rewritten workload keeps its document's original text in an annotation.
If anything is refused, nothing is rewritten: the result carries the refusals only.

`back` is the inverse, given the migrated stream: each document with that annotation becomes
its original text again, the appended RBAC goes, and everything else is left as it was. So
`back(migrate(x).text).text == x`, byte for byte, for a chart's rendering; for `kubectl get -o
yaml` output, except the fields the API server sets (`status`, `resourceVersion`, ...), which
neither writes (an apply with a stale resourceVersion fails).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from kopf_csi.migration import mapping, rbac, rendering, sidecars, stream

__all__ = ["Result", "back", "migrate"]

DEFAULT_IMAGE = "kopf-csi:0.1.0"


@dataclasses.dataclass
class Result:
    text: str  # the stream to write ("" when refused)
    rewrites: list[rendering.Rewrite]
    rbac: list[dict[str, Any]]
    notes: list[str]
    refusals: list[mapping.Refusal]

    @property
    def changed(self) -> bool:
        return bool(self.rewrites) or bool(self.rbac)


def migrate(
    text: str, *, image: str = DEFAULT_IMAGE, ratio: bool = False, source: str = "<stdin>"
) -> Result:
    documents = stream.split(text, source=source)
    result = Result(text="", rewrites=[], rbac=[], notes=[], refusals=[])
    accounts: dict[tuple[str, str], str] = {}
    for document in documents:
        original = document.text
        first: dict[str, Any] | None = None
        for obj in document.objects:
            done = rendering.rewrite(obj, image=image, ratio=ratio)
            if done is None:
                continue
            result.rewrites.append(done)
            result.refusals += done.refusals
            result.notes += done.notes
            if done.refusals:
                continue
            if first is None:
                first = obj
                rendering.annotate(obj, original=original, done=done, ratio=ratio)
            meta = obj.get("metadata") or {}
            spec = sidecars.pod_spec(obj) or {}
            account = spec.get("serviceAccountName") or spec.get("serviceAccount") or "default"
            namespace = meta.get("namespace") or "default"
            accounts.setdefault((namespace, str(account)), rendering.name_of(obj))
        if first is not None:
            document.text = document.rewritten()
    if result.refusals:
        return result
    everything = [obj for _, obj in stream.walk(documents)]
    for (namespace, account), workload in accounts.items():
        found = rbac.missing(everything, namespace=namespace, account=account)
        if not found.known:
            result.notes.append(
                f"{workload}: the input has no RBAC for ServiceAccount {namespace}/{account}:"
                " every rule kopf-csi needs is added (the chart's own may grant some already)"
            )
        result.rbac += rbac.objects(found, name=f"kopf-csi-{namespace}-{account}")
    added = [stream.Document(text="", body=obj) for obj in result.rbac]
    for document in added:
        document.text = "---\n" + stream.dump(document.body)
    tail = stream.join(documents)
    if added and tail and not tail.endswith("\n"):
        tail += "\n"
    result.text = tail + stream.join(added)
    result.notes = list(dict.fromkeys(result.notes))
    return result


def back(text: str, *, source: str = "<stdin>") -> Result:
    """The original stream again, from a migrated one."""
    documents = stream.split(text, source=source)
    result = Result(text="", rewrites=[], rbac=[], notes=[], refusals=[])
    kept = []
    for document in documents:
        objects = document.objects
        labels = [((o.get("metadata") or {}).get("labels") or {}) for o in objects]
        if objects and all(
            label.get("app.kubernetes.io/managed-by") == rbac.MANAGED_BY for label in labels
        ):
            result.rbac += objects
            continue
        original = next(
            (
                (o.get("metadata") or {}).get("annotations", {}).get(rendering.ORIGINAL)
                for o in objects
                if rendering.ORIGINAL in ((o.get("metadata") or {}).get("annotations") or {})
            ),
            None,
        )
        if original is not None:
            document = _restored(str(original), source)
            result.rewrites.append(
                rendering.Rewrite(
                    workload=", ".join(rendering.name_of(o) for o in document.objects),
                    replaced=[], containers=[], notes=[], refusals=[],
                )
            )  # fmt: skip
        kept.append(document)
    result.text = stream.join(kept)
    return result


def _restored(text: str, source: str) -> stream.Document:
    """The original document; without the fields the API server sets, if it had them."""
    [document] = stream.split(text, source=source) or [stream.Document(text, None)]
    objects = document.objects
    if any(rendering.has_server_fields(obj) for obj in objects):
        for obj in objects:
            rendering.strip_server_fields(obj)
        document.text = document.rewritten()
    return document
