"""The attacher's pure decisions, table-tested.

We test these aspects:
- which queue a VA goes to (ours or not, deleting or not, trivial mode);
- `shouldEnqueueVAChange`: an update of only `attachError`/`detachError` is not queued;
- the node ID from CSINode, the VA annotation as the fallback, and the Go error texts;
- the finalizer patches: JSON patches guarded against stale reads, applied as the API does;
- the VA metadata patch, the status patches and the `{message, time, errorCode}` shape;
- which PV spec a VA attaches, and the errors of a wrong source;
- when our PV finalizer may go; what the reconciler re-syncs and reports;
- the Go error texts and `isFinalError`.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kopf_csi.attaching import decisions
from kopf_csi.attaching.decisions import Route
from kopf_csi.attaching.errors import AttachError, error_code, error_text, is_final
from kopf_csi.csi import Code, CSIError, CSITimeoutError
from kopf_csi.testing.apimachinery import strategic_merge_patch
from kopf_csi.testing.emulator import EmulatedCluster

DRIVER = "hostpath.csi.k8s.io"
FINALIZER = "external-attacher/hostpath-csi-k8s-io"
ANNOTATION = "csi.alpha.kubernetes.io/node-id"
METHOD = "/csi.v1.Controller/ControllerPublishVolume"


def _va(
    name: str = "va-1",
    *,
    pv: str | None = "pv-1",
    node: str = "node-1",
    attacher: str = DRIVER,
    **extra: Any,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "resourceVersion": "7", **extra.pop("meta", {})}
    body: dict[str, Any] = {
        "metadata": meta,
        "spec": {"attacher": attacher, "nodeName": node, "source": {}},
    }
    if pv is not None:
        body["spec"]["source"]["persistentVolumeName"] = pv
    body.update(extra)
    return body


def _csinode(*drivers: tuple[str, str]) -> dict[str, Any]:
    return {"spec": {"drivers": [{"name": n, "nodeID": i} for n, i in drivers]}}


# -- routing -----------------------------------------------------------------------------------

DELETING = _va(meta={"deletionTimestamp": "t"})


@pytest.mark.parametrize(
    ("va", "trivial", "expected"),
    [
        pytest.param(_va(), False, Route.ATTACH, id="new -> attach"),
        pytest.param(DELETING, False, Route.DETACH, id="deleting -> detach"),
        pytest.param(_va(attacher="other"), False, Route.IGNORE, id="another attacher -> ignored"),
        pytest.param(DELETING, True, Route.ATTACH, id="trivial -> attach"),
    ],
)
def test_route(va: dict[str, Any], trivial: bool, expected: Route) -> None:
    assert decisions.route(va, driver=DRIVER, trivial=trivial) is expected


def _changed(old: dict[str, Any], **status: Any) -> dict[str, Any]:
    new = copy.deepcopy(old)
    new["metadata"]["resourceVersion"] = str(int(old["metadata"]["resourceVersion"]) + 1)
    new.setdefault("status", {}).update(status)
    return new


ERROR = {"message": "boom", "time": "2026-01-01T00:00:00Z", "errorCode": 13}
LATER = {"message": "boom", "time": "2026-01-01T00:00:05Z", "errorCode": 13}
BASE = _va(status={"attached": False})
FAILED = _changed(BASE, attachError=ERROR)


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        pytest.param(None, BASE, True, id="first sight -> queued"),
        pytest.param(BASE, copy.deepcopy(BASE), True, id="same resourceVersion (resync) -> queued"),
        pytest.param(BASE, _changed(BASE, attached=True), True, id="no errors anywhere -> queued"),
        pytest.param(BASE, FAILED, False, id="attachError set -> ignored"),
        pytest.param(FAILED, _changed(FAILED, attachError=LATER), False,
                     id="attachError renewed -> ignored"),
        pytest.param(BASE, _changed(BASE, detachError=ERROR), False,
                     id="detachError set -> ignored"),
        pytest.param(FAILED, _changed(FAILED, attached=True), True,
                     id="error and more -> queued"),
        pytest.param(FAILED, _changed(FAILED, attachError=None), False,
                     id="only the error cleared -> ignored (as in Go)"),
        pytest.param(
            FAILED,
            {**_changed(FAILED, attachError=LATER),
             "metadata": {**FAILED["metadata"], "resourceVersion": "9", "managedFields": [{}]}},
            False, id="error and managedFields -> ignored",
        ),
        pytest.param(
            FAILED,
            {**_changed(FAILED, attachError=LATER),
             "metadata": {**FAILED["metadata"], "resourceVersion": "9",
                          "deletionTimestamp": "t"}},
            True, id="error and deletion -> queued",
        ),
    ],
)  # fmt: skip
def test_should_enqueue_change(
    old: dict[str, Any] | None, new: dict[str, Any], expected: bool
) -> None:
    assert decisions.should_enqueue_change(old, new) is expected


# -- the node ID -------------------------------------------------------------------------------

WITH_ANNOTATION = _va(meta={"annotations": {ANNOTATION: "from-va"}})


@pytest.mark.parametrize(
    ("csinode", "va", "expected"),
    [
        pytest.param(_csinode((DRIVER, "id-1")), None, "id-1", id="csinode -> its node ID"),
        pytest.param(_csinode(("other", "x"), (DRIVER, "id-1")), WITH_ANNOTATION, "id-1",
                     id="csinode wins over the annotation"),
        pytest.param(_csinode((DRIVER, "")), None, "", id="an empty node ID is still found"),
        pytest.param(None, WITH_ANNOTATION, "from-va", id="no csinode -> annotation"),
        pytest.param(_csinode(("other", "x")), WITH_ANNOTATION, "from-va",
                     id="csinode without our driver -> annotation"),
    ],
)  # fmt: skip
def test_node_id(csinode: dict[str, Any] | None, va: dict[str, Any] | None, expected: str) -> None:
    assert decisions.node_id(driver=DRIVER, node_name="node-1", csinode=csinode, va=va) == expected


@pytest.mark.parametrize(
    ("csinode", "va", "message"),
    [
        pytest.param(None, None, 'csinode.storage.k8s.io "node-1" not found', id="no csinode"),
        pytest.param(None, _va(), 'csinode.storage.k8s.io "node-1" not found',
                     id="no csinode, no annotation"),
        pytest.param(_csinode(("other", "x")), None,
                     f"CSINode node-1 does not contain driver {DRIVER}", id="no driver entry"),
        pytest.param(_csinode(("other", "x")), None,
                     f"CSINode node-1 does not contain driver {DRIVER}",
                     id="attach never falls back to the annotation"),
    ],
)  # fmt: skip
def test_node_id_errors(
    csinode: dict[str, Any] | None, va: dict[str, Any] | None, message: str
) -> None:
    with pytest.raises(AttachError) as error:
        decisions.node_id(driver=DRIVER, node_name="node-1", csinode=csinode, va=va)
    assert error.value.message == message


# -- patches -----------------------------------------------------------------------------------


def _object(finalizers: list[str] | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "pv-1", "resourceVersion": "5"}
    if finalizers is not None:
        meta["finalizers"] = finalizers
    return {"metadata": meta}


@pytest.mark.parametrize(
    ("finalizers", "expected"),
    [
        pytest.param(None, [FINALIZER], id="no list"),
        pytest.param([], [FINALIZER], id="empty list"),
        pytest.param(["a"], ["a", FINALIZER], id="appended"),
    ],
)
def test_add_finalizer_patch(finalizers: list[str] | None, expected: list[str]) -> None:
    obj = _object(finalizers)
    patch = decisions.add_finalizer_patch(obj, FINALIZER)
    assert patch == {"metadata": {"finalizers": [FINALIZER]}}  # the item only: the server merges
    assert strategic_merge_patch(obj, patch)["metadata"]["finalizers"] == expected


def test_add_finalizer_patch_is_none_when_present() -> None:
    assert decisions.add_finalizer_patch(_object(["a", FINALIZER]), FINALIZER) is None


def test_remove_finalizer_patch() -> None:
    obj = _object(["a", FINALIZER, "b"])
    patch = decisions.remove_finalizer_patch(obj, FINALIZER)
    assert patch == {"metadata": {"$deleteFromPrimitiveList/finalizers": [FINALIZER]}}
    assert strategic_merge_patch(obj, patch)["metadata"]["finalizers"] == ["a", "b"]
    assert decisions.remove_finalizer_patch(_object(["a"]), FINALIZER) is None
    assert decisions.remove_finalizer_patch(_object(None), FINALIZER) is None


@pytest.mark.parametrize(
    ("read", "changed", "plan", "expected"),
    [
        pytest.param(["a"], ["a", "b"], decisions.add_finalizer_patch, ["a", "b", FINALIZER],
                     id="add: another added since"),
        pytest.param(None, ["b"], decisions.add_finalizer_patch, ["b", FINALIZER],
                     id="add: a list appeared since"),
        pytest.param(["a", FINALIZER], [FINALIZER], decisions.remove_finalizer_patch, [],
                     id="remove (#1217): another removed since"),
        pytest.param([FINALIZER], [FINALIZER, "b"], decisions.remove_finalizer_patch, ["b"],
                     id="remove: another added since"),
    ],
)  # fmt: skip
def test_finalizer_patches_never_write_over_a_change_since_the_read(
    read: list[str] | None, changed: list[str], plan: Any, expected: list[str]
) -> None:
    """Sent as the attacher sends them (strategic, no resourceVersion), patches made from a
    stale read change only our item: what another controller changed meanwhile stays, and no
    race is lost (no 409, no re-read)."""
    cluster = EmulatedCluster(storage_protection=False)
    cluster.create("persistentvolumes", {"metadata": {"name": "pv-1", "finalizers": read}})
    stale = cluster.get("persistentvolumes", None, "pv-1")
    assert stale is not None
    cluster.patch("persistentvolumes", None, "pv-1", {"metadata": {"finalizers": changed}})
    cluster.patch("persistentvolumes", None, "pv-1", plan(stale, FINALIZER), patch_type="strategic")
    current = cluster.get("persistentvolumes", None, "pv-1") or {}
    assert (current["metadata"].get("finalizers") or []) == expected


@pytest.mark.parametrize(
    ("meta", "expected"),
    [
        pytest.param({}, {"finalizers": [FINALIZER], "annotations": {ANNOTATION: "id-1"}},
                     id="both missing"),
        pytest.param({"finalizers": ["x"], "annotations": {ANNOTATION: "old"}},
                     {"finalizers": [FINALIZER], "annotations": {ANNOTATION: "id-1"}},
                     id="finalizer merged, annotation replaced"),
        pytest.param({"finalizers": [FINALIZER]}, {"annotations": {ANNOTATION: "id-1"}},
                     id="only the annotation"),
    ],
)  # fmt: skip
def test_va_metadata_patch(meta: dict[str, Any], expected: dict[str, Any]) -> None:
    patch = decisions.va_metadata_patch(_va(meta=meta), finalizer=FINALIZER, node_id="id-1")
    assert patch == {"metadata": expected}


def test_va_metadata_patch_is_none_when_done() -> None:
    meta = {"finalizers": [FINALIZER], "annotations": {ANNOTATION: "id-1"}}
    assert decisions.va_metadata_patch(_va(meta=meta), finalizer=FINALIZER, node_id="id-1") is None


def test_status_patches() -> None:
    assert decisions.attached_status({"devicePath": "/dev/x"}) == {
        "status": {"attached": True, "attachmentMetadata": {"devicePath": "/dev/x"},
                   "attachError": None}
    }  # fmt: skip
    assert decisions.attached_status({}) == {
        "status": {"attached": True, "attachmentMetadata": None, "attachError": None}
    }
    assert decisions.detached_status() == {
        "status": {"attached": False, "detachError": None, "attachmentMetadata": None}
    }


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        pytest.param(CSIError("nope", method=METHOD, code=Code.RESOURCE_EXHAUSTED),
                     {"message": "rpc error: code = ResourceExhausted desc = nope", "errorCode": 8},
                     id="gRPC"),
        pytest.param(CSITimeoutError("timed out after 15s", method=METHOD),
                     {"message": "rpc error: code = DeadlineExceeded"
                                 " desc = context deadline exceeded",
                      "errorCode": 4}, id="timeout"),
        pytest.param(AttachError('persistentvolume "pv-1" not found'),
                     {"message": 'persistentvolume "pv-1" not found'}, id="not gRPC: no code"),
    ],
)  # fmt: skip
def test_error_status(error: BaseException, expected: dict[str, Any]) -> None:
    now = "2026-01-01T00:00:00Z"
    assert decisions.error_status("attachError", error, now=now) == {
        "status": {"attachError": {**expected, "time": now}}
    }


# -- the attached volume -----------------------------------------------------------------------

PV = {"metadata": {"name": "pv-1"}, "spec": {"csi": {"driver": DRIVER, "volumeHandle": "h"}}}
INLINE = {"csi": {"driver": DRIVER, "volumeHandle": "inline"}}


def test_volume_spec_of_a_pv_and_of_an_inline_volume() -> None:
    assert decisions.volume_spec(_va(), {"pv-1": PV}.get) == (PV["spec"], PV)
    inline = _va(pv=None)
    inline["spec"]["source"]["inlineVolumeSpec"] = INLINE
    assert decisions.volume_spec(inline, lambda _: None) == (INLINE, None)


def _source(**source: Any) -> dict[str, Any]:
    va = _va(pv=None)
    va["spec"]["source"] = source
    return va


@pytest.mark.parametrize(
    ("va", "message"),
    [
        pytest.param(_va(pv="pv-x"), 'persistentvolume "pv-x" not found', id="missing PV"),
        pytest.param(_source(persistentVolumeName="pv-1", inlineVolumeSpec=INLINE),
                     "both InlineCSIVolumeSource and PersistentVolumeName specified in VA source",
                     id="both"),
        pytest.param(_source(),
                     "neither InlineCSIVolumeSource nor PersistentVolumeName specified"
                     " in VA source",
                     id="neither"),
        pytest.param(_source(inlineVolumeSpec={"nfs": {}}),
                     "inline volume spec contains nil CSI source", id="inline without csi"),
    ],
)  # fmt: skip
def test_volume_spec_errors(va: dict[str, Any], message: str) -> None:
    with pytest.raises(AttachError) as error:
        decisions.volume_spec(va, {"pv-1": PV}.get)
    assert error.value.message == message


# -- the PV finalizer --------------------------------------------------------------------------


def _pv(*, deleting: bool = True, finalizers: tuple[str, ...] = (FINALIZER,)) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "pv-1", "finalizers": list(finalizers)}
    if deleting:
        meta["deletionTimestamp"] = "t"
    return {"metadata": meta}


@pytest.mark.parametrize(
    ("pv", "attachments", "expected"),
    [
        pytest.param(_pv(), [], True, id="deleting, ours, no VA -> release"),
        pytest.param(_pv(), [_va(pv="pv-2")], True, id="VAs of other PVs do not count"),
        pytest.param(_pv(), [_va()], False, id="a VA references it -> keep"),
        pytest.param(_pv(), [_va(attacher="other")], False, id="even another attacher's VA"),
        pytest.param(_pv(deleting=False), [], False, id="not deleting -> keep"),
        pytest.param(_pv(finalizers=("other",)), [], False, id="not our finalizer -> nothing"),
    ],
)
def test_should_release_volume(
    pv: dict[str, Any], attachments: list[dict[str, Any]], expected: bool
) -> None:
    assert (
        decisions.should_release_volume(pv, finalizer=FINALIZER, attachments=attachments)
        is expected
    )


# -- reconciliation ----------------------------------------------------------------------------


def _attached(name: str, pv: str, attached: bool, **kwargs: Any) -> dict[str, Any]:
    return _va(name, pv=pv, status={"attached": attached}, **kwargs)


VOLUMES = {
    f"pv-{i}": {"metadata": {"name": f"pv-{i}"}, "spec": {"csi": {"volumeHandle": f"h-{i}"}}}
    for i in range(1, 6)
}
CSINODES = {"node-1": _csinode((DRIVER, "id-1"))}


def test_reconcile() -> None:
    attachments = [
        _attached("in-sync", "pv-1", True),
        _attached("detached-behind-our-back", "pv-2", True),
        _attached("attached-behind-our-back", "pv-3", False),
        _attached("not-attached-yet", "pv-4", False),
        _attached("other-attacher", "pv-2", True, attacher="other"),
        _attached("unknown-pv", "pv-9", True),
        _attached("unknown-node", "pv-5", True, node="node-9"),
        _attached("annotated-node", "pv-5", True, node="node-8",
                  meta={"annotations": {ANNOTATION: "id-8"}}),
    ]  # fmt: skip
    published = {"h-1": ["id-1"], "h-3": ["id-1"], "h-5": ["id-8", "id-7"], "h-x": ["id-1"]}
    plan = decisions.reconcile(
        driver=DRIVER,
        attachments=attachments,
        volumes=VOLUMES.get,
        csinodes=CSINODES.get,
        published=published,
        known_handles=["h-1", "h-2", "h-3", "h-5"],
    )
    assert plan.resync == ["detached-behind-our-back", "attached-behind-our-back"]
    assert plan.unexpected == [("h-5", "id-7")]  # h-x is not one of our PVs


# -- errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize("code", [c for c in Code if c is not Code.OK])
def test_error_text_and_code(code: Code) -> None:
    error = CSIError("why", method=METHOD, code=code)
    assert error_text(error) == f"rpc error: code = {code.title} desc = why"
    assert error_code(error) == code.value
    transient = {
        Code.CANCELLED, Code.DEADLINE_EXCEEDED, Code.UNAVAILABLE, Code.RESOURCE_EXHAUSTED,
        Code.ABORTED,
    }  # fmt: skip
    assert is_final(error) is (code not in transient)


def test_errors_that_are_not_grpc() -> None:
    error = AttachError("could not save VolumeAttachment: conflict")
    assert error_text(error) == "could not save VolumeAttachment: conflict"
    assert error_code(error) is None
    assert not is_final(error)
    assert Code.CANCELLED.title == "Canceled"  # Go's spelling
