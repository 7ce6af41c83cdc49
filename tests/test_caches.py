"""The caches keep compact copies: equal to what was stored, minus managedFields, strings shared."""

from __future__ import annotations

import json
import sys

import pytest

from kopf_csi import caches
from kopf_csi.caches import Cache

VOLUME = {
    "apiVersion": "v1", "kind": "PersistentVolume",
    "metadata": {"name": "pvc-1", "finalizers": ["kubernetes.io/pv-protection"],
                 "managedFields": [{"manager": "kube-controller-manager", "fieldsV1": {}}]},
    "spec": {"csi": {"driver": "hostpath.csi.kopf.dev", "volumeHandle": "v-1"},
             "capacity": {"storage": "1Gi"}, "mountOptions": ["ro", "x" * 100]},
    "status": {"phase": "Bound", "message": "y" * 100},
}  # fmt: skip


def test_a_stored_object_equals_the_original_without_managed_fields() -> None:
    cache = Cache()
    cache.store(json.loads(json.dumps(VOLUME)))
    stored = cache.get("pvc-1")
    expected = json.loads(json.dumps(VOLUME))
    del expected["metadata"]["managedFields"]
    assert stored == expected


def test_equal_strings_from_separate_objects_are_one_object() -> None:
    cache = Cache()
    for name in ("pvc-1", "pvc-2"):
        body = json.loads(json.dumps(VOLUME).replace('"pvc-1"', json.dumps(name)))
        cache.store(body)
    one, two = cache.get("pvc-1"), cache.get("pvc-2")
    assert one is not None
    assert two is not None
    assert one["spec"]["csi"]["driver"] is two["spec"]["csi"]["driver"]
    assert one["status"]["phase"] is two["status"]["phase"]
    assert next(iter(one["spec"])) is next(iter(two["spec"]))  # keys too
    assert one["status"]["message"] == two["status"]["message"]  # long texts: equal, not shared


def test_the_stored_copy_is_independent_of_the_caller_s_dict() -> None:
    cache = Cache()
    body = json.loads(json.dumps(VOLUME))
    cache.store(body)
    body["status"]["phase"] = "Released"
    stored = cache.get("pvc-1")
    assert stored is not None
    assert stored["status"]["phase"] == "Bound"


def test_the_same_version_is_not_copied_again_and_a_new_one_is() -> None:
    cache = Cache()
    first = json.loads(
        json.dumps({**VOLUME, "metadata": {**VOLUME["metadata"], "resourceVersion": "5"}})
    )
    cache.store(first)
    kept = cache.get("pvc-1")
    cache.store(json.loads(json.dumps(first)))
    assert cache.get("pvc-1") is kept  # another handler's copy of the same event
    newer = json.loads(json.dumps(first))
    newer["metadata"]["resourceVersion"] = "6"
    newer["status"]["phase"] = "Released"
    cache.store(newer)
    stored = cache.get("pvc-1")
    assert stored is not None
    assert stored["status"]["phase"] == "Released"


def test_a_plain_cache_keeps_the_object_minus_managed_fields() -> None:
    cache = Cache(compact=False)
    body = json.loads(json.dumps(VOLUME))
    cache.store(body)
    stored = cache.get("pvc-1")
    assert stored is not None
    assert "managedFields" not in stored["metadata"]
    assert stored["spec"] is body["spec"]  # not copied: claims come and go
    del body["metadata"]["managedFields"]
    cache.store(body)
    assert cache.get("pvc-1") is body


def test_an_older_version_does_not_replace_a_newer_one() -> None:
    cache = Cache()
    newer = json.loads(json.dumps(VOLUME))
    newer["metadata"]["resourceVersion"] = "12"
    cache.store(newer)  # e.g. our own write's answer
    late = json.loads(json.dumps(VOLUME))
    late["metadata"]["resourceVersion"] = "9"
    late["status"]["phase"] = "Pending"
    cache.store(late)  # the watch event of an earlier version, arriving after it
    stored = cache.get("pvc-1")
    assert stored is not None
    assert stored["status"]["phase"] == "Bound"
    opaque = json.loads(json.dumps(VOLUME))
    opaque["metadata"]["resourceVersion"] = "a1"  # not an integer: the last arrival wins
    opaque["status"]["phase"] = "Released"
    cache.store(opaque)
    assert cache.get("pvc-1")["status"]["phase"] == "Released"  # type: ignore[index]


def test_a_new_version_shares_what_did_not_change_with_the_one_before() -> None:
    cache = Cache()
    first = json.loads(json.dumps(VOLUME))
    first["metadata"]["resourceVersion"] = "5"
    cache.store(first)
    before = cache.get("pvc-1")
    assert before is not None
    newer = json.loads(json.dumps(first))
    newer["metadata"]["resourceVersion"] = "6"
    newer["status"]["phase"] = "Released"
    newer["metadata"]["managedFields"].append({"manager": "csi-provisioner"})
    cache.store(newer)
    after = cache.get("pvc-1")
    assert after is not None
    expected = json.loads(json.dumps(newer))
    del expected["metadata"]["managedFields"]
    assert after == expected
    assert after["spec"] is before["spec"]  # unchanged: not compacted again
    assert after["metadata"]["finalizers"] is before["metadata"]["finalizers"]
    assert after["status"] is not before["status"]
    assert before["status"]["phase"] == "Bound"  # the old version was not changed in place
    assert after["status"]["phase"] is sys.intern("Released")  # compacted as ever


def _version(name: str, version: str) -> dict[str, object]:
    return {"metadata": {"name": name, "resourceVersion": version}, "spec": {}}


def test_an_object_deleted_by_our_write_is_not_brought_back_by_an_older_event() -> None:
    """Our write's answer (the last finalizer gone) comes ahead of the watch: another writer's
    version from before it, arriving after it, must not put the object back."""
    cache = Cache()
    cache.store(_version("va-1", "10"))
    cache.deleted(_version("va-1", "12"))
    cache.store(_version("va-1", "11"))  # the other writer's, just before ours
    cache.store(_version("va-1", "12"))
    assert "va-1" not in cache
    cache.remove(_version("va-1", "13"))  # its DELETED event: nothing left to remember
    cache.store(_version("va-1", "20"))  # made again, with the same name
    assert cache.get("va-1") == _version("va-1", "20")


def test_a_newer_version_after_our_deletion_is_kept() -> None:
    cache = Cache()
    cache.deleted(_version("pv-1", "5"))
    cache.store(_version("pv-1", "9"))  # made again before the DELETED event came
    assert cache.get("pv-1") == _version("pv-1", "9")
    cache.store(_version("pv-1", "4"))  # an older one is not kept, as ever
    assert cache.get("pv-1") == _version("pv-1", "9")


def test_deletions_remembered_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(caches, "GONE_REMEMBERED", 3)
    cache = Cache()
    for index in range(5):
        cache.deleted(_version(f"pv-{index}", "7"))
    cache.store(_version("pv-0", "6"))  # forgotten: an old event is let in again
    cache.store(_version("pv-4", "6"))  # remembered
    assert [obj["metadata"]["name"] for obj in cache] == ["pv-0"]


def _attachment(name: str, version: str, volume: str | None) -> dict[str, object]:
    source = {"persistentVolumeName": volume} if volume else {"inlineVolumeSpec": {}}
    return {
        "metadata": {"name": name, "resourceVersion": version},
        "spec": {"attacher": "hostpath.csi.kopf.dev", "nodeName": "node-1", "source": source},
    }


def _names(objects: list[object]) -> list[str]:
    return [obj["metadata"]["name"] for obj in objects]  # type: ignore[index]


def test_the_attachments_index_finds_a_volume_s_attachments_through_their_whole_life() -> None:
    """What a PV's checks read instead of every VA (DeleteVolume's wait, the PV finalizer,
    the resizer's in-use check): each store, removal, deletion by our write and prune moves it."""
    cache = caches.Caches().attachments
    cache.store(_attachment("va-1", "1", "pv-a"))
    cache.store(_attachment("va-2", "2", "pv-a"))
    cache.store(_attachment("va-3", "3", "pv-b"))
    cache.store(_attachment("va-4", "4", None))  # an inline volume: no PV, not indexed
    assert _names(cache.indexed("pv-a")) == ["va-1", "va-2"]
    assert _names(cache.indexed("pv-b")) == ["va-3"]
    cache.store(_attachment("va-2", "5", "pv-b"))  # a new version names another PV
    assert _names(cache.indexed("pv-a")) == ["va-1"]
    assert _names(cache.indexed("pv-b")) == ["va-3", "va-2"]
    cache.store(_attachment("va-2", "4", "pv-a"))  # an older version is not kept, nor indexed
    assert _names(cache.indexed("pv-a")) == ["va-1"]
    cache.remove(_attachment("va-1", "6", "pv-a"))
    cache.deleted(_attachment("va-3", "7", "pv-b"))
    assert cache.indexed("pv-a") == []
    assert _names(cache.indexed("pv-b")) == ["va-2"]
    mark = cache.mark()
    assert cache.prune({"va-4"}, before=mark) == [_attachment("va-2", "5", "pv-b")]
    assert cache.indexed("pv-b") == []
    assert cache._indexed == {}  # nothing left behind for volumes that are gone


def test_a_cache_without_an_index_says_so() -> None:
    with pytest.raises(TypeError, match="no index"):
        Cache().indexed("pv-a")
