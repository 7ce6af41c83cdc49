"""Migrate, then `--back`, gives the input again, byte for byte.

We test these aspects:
- each of the four shapes round-trips exactly, through the command line too;
- everything but the rewritten workload is passed through byte for byte, and the added RBAC
  is what `--back` drops;
- a migrated stream migrates to itself (nothing left to do);
- `kubectl get -o yaml` output (a List with the server's fields) round-trips but for those
  fields, which neither direction writes (a stale resourceVersion would fail the apply).
"""

from __future__ import annotations

import pytest

from kopf_csi.migration import rendering, stream, transform

from .conftest import SHAPES, objects, run, text_of, workload


@pytest.mark.parametrize("shape", SHAPES)
def test_migrate_then_back_is_the_input(shape: str) -> None:
    original = text_of(shape)
    forth = transform.migrate(original)
    assert not forth.refusals
    assert forth.text != original
    assert transform.back(forth.text).text == original


@pytest.mark.parametrize("shape", SHAPES)
def test_the_command_line_round_trips(shape: str) -> None:
    code, forth, _ = run([], stdin=text_of(shape))
    assert code == 0
    code, back, err = run(["--back", "-"], stdin=forth)
    assert code == 0
    assert back == text_of(shape)
    assert "restored: " in err


@pytest.mark.parametrize("shape", SHAPES)
def test_only_the_workload_changes_and_rbac_is_appended(shape: str) -> None:
    original = stream.split(text_of(shape))
    forth = stream.split(transform.migrate(text_of(shape)).text)
    changed = [
        index for index, document in enumerate(original) if forth[index].text != document.text
    ]
    assert [original[index].objects[0]["kind"] for index in changed] in (
        ["Deployment"],
        ["StatefulSet"],
    )
    added = [obj for document in forth[len(original) :] for obj in document.objects]
    assert added  # every shape's ServiceAccount lacks something kopf-csi needs
    assert {obj["metadata"]["labels"]["app.kubernetes.io/managed-by"] for obj in added} == {
        "kopf-csi-migrate"
    }


@pytest.mark.parametrize("shape", SHAPES)
def test_a_migrated_stream_has_nothing_left_to_migrate(shape: str) -> None:
    once = transform.migrate(text_of(shape)).text
    twice = transform.migrate(once)
    assert not twice.rewrites
    assert not twice.rbac
    assert twice.text == once
    code, out, _ = run(["--check"], stdin=once)
    assert (code, out.strip()) == (0, "nothing to change: no Go CSI controller sidecar found")


def test_kubectl_get_output_round_trips_without_the_server_fields() -> None:
    deployment = workload(text_of("cloud-block"))
    deployment["metadata"].update(
        resourceVersion="81923", uid="2b4f", generation=3, creationTimestamp="2026-01-01T00:00:00Z"
    )
    deployment["metadata"]["annotations"] = {rendering.LAST_APPLIED: "{}"}
    deployment["status"] = {"replicas": 2, "readyReplicas": 2}
    listed = stream.dump({"apiVersion": "v1", "kind": "List", "items": [deployment],
                          "metadata": {"resourceVersion": ""}})  # fmt: skip
    forth = transform.migrate(listed)
    [item] = objects(forth.text)[0]["items"]
    assert "status" not in item
    assert "resourceVersion" not in item["metadata"]
    assert rendering.LAST_APPLIED not in item["metadata"]["annotations"]
    [back] = objects(transform.back(forth.text).text)[0]["items"]
    for field in rendering.SERVER_FIELDS:
        deployment["metadata"].pop(field, None)
    del deployment["status"], deployment["metadata"]["annotations"]
    assert back == deployment
