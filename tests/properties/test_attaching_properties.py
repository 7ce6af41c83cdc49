"""Properties of the attacher's pure functions over hostile but well-typed objects.

We test these aspects:
- routing and change filtering answer for any VolumeAttachment;
- the PV spec, the node ID and the requests either come out or raise `AttachError` (which
  becomes `status.attachError`), for any VA, PV, CSINode; a request carries the PV's handle;
- `error_status` of any error text is a JSON-serialisable status patch;
- `reconcile` answers for any set of VAs, PVs and published volumes, and only ever resyncs
  our own VAs.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from kopf_csi.attaching import decisions, requests
from kopf_csi.attaching.errors import AttachError
from kopf_csi.csi import CSIError
from kopf_csi.csi.codes import Code

from .strategies import ATTACHMENTS, CSINODES, DRIVER, NAME, PV_SPECS, TEXT


def pv_of(spec: dict[str, Any], name: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": spec}


@given(va=ATTACHMENTS, old=st.one_of(st.none(), ATTACHMENTS), trivial=st.booleans())
def test_routing_answers_for_any_attachment(
    va: dict[str, Any], old: dict[str, Any] | None, trivial: bool
) -> None:
    route = decisions.route(va, driver=DRIVER, trivial=trivial)
    if va["spec"].get("attacher") != DRIVER:
        assert route is decisions.Route.IGNORE
    assert isinstance(decisions.should_enqueue_change(old, va), bool)


@given(
    va=ATTACHMENTS,
    spec=PV_SPECS,
    csinode=st.one_of(st.none(), CSINODES),
    fallback=st.booleans(),
    publish_readonly=st.booleans(),
)
def test_requests_come_out_or_raise_an_attach_error(
    va: dict[str, Any],
    spec: dict[str, Any],
    csinode: dict[str, Any] | None,
    fallback: bool,
    publish_readonly: bool,
) -> None:
    pv_name = decisions.volume_name(va) or ""
    pv = pv_of(spec, pv_name)
    try:
        found, _ = decisions.volume_spec(va, lambda name: pv if name == pv_name else None)
        node = decisions.node_id(
            driver=DRIVER,
            node_name=str(va["spec"].get("nodeName") or ""),
            csinode=csinode,
            va=va if fallback else None,
        )
        requests.publish_secret_ref(found)
        publish = requests.publish_request(
            found,
            node_id=node,
            secrets={},
            publish_readonly=publish_readonly,
            single_node_multi_writer=False,
            default_fstype="",
        )
        unpublish = requests.unpublish_request(found, node_id=node, secrets={})
    except AttachError:
        return  # becomes the VA's status.attachError
    handle = str(found["csi"].get("volumeHandle") or "")
    assert publish.volume_id == unpublish.volume_id == handle
    assert publish.node_id == node
    assert not publish.readonly or publish_readonly


@given(message=TEXT, code=st.sampled_from(list(Code)), grpc=st.booleans())
def test_error_status_is_always_a_valid_patch(message: str, code: Code, grpc: bool) -> None:
    error: BaseException = (
        CSIError(message, method="ControllerPublishVolume", code=code)
        if grpc
        else AttachError(message or "x")
    )
    patch = decisions.error_status("attachError", error, now="2026-01-01T00:00:00Z")
    json.dumps(patch)
    assert set(patch["status"]["attachError"]) <= {"message", "time", "errorCode"}


@given(
    attachments=st.lists(ATTACHMENTS, max_size=4),
    specs=st.dictionaries(NAME, PV_SPECS, max_size=3),
    csinodes=st.dictionaries(NAME, CSINODES, max_size=2),
    published=st.dictionaries(TEXT, st.lists(TEXT, max_size=2), max_size=3),
)
def test_reconcile_answers_and_resyncs_only_our_attachments(
    attachments: list[dict[str, Any]],
    specs: dict[str, dict[str, Any]],
    csinodes: dict[str, dict[str, Any]],
    published: dict[str, list[str]],
) -> None:
    plan = decisions.reconcile(
        driver=DRIVER,
        attachments=attachments,
        volumes=lambda name: pv_of(specs[name], name) if name in specs else None,
        csinodes=csinodes.get,
        published=published,
        known_handles=list(published),
    )
    ours = {va["metadata"]["name"] for va in attachments if decisions.is_ours(va, DRIVER)}
    assert set(plan.resync) <= ours
