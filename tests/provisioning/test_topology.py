"""CreateVolume's accessibility requirements and the PV's node affinity, as `topology.go`.

We test these aspects:
- WaitForFirstConsumer: requisite from the cluster or allowedTopologies, preferred rotated to
  the selected node; `--strict-topology` sends only the node's segment;
- Immediate: a random CSINode's keys, preferred rotated by the StatefulSet hash; no requirement
  with `--immediate-topology=false` and no allowedTopologies;
- every failure: a missing CSINode reschedules, the others keep the claim, with Go's texts;
- the per-claim memo: keys, node labels and cluster segments survive node deletion;
- flattening allowedTopologies, sorting and de-duplicating terms, the FNV-1 hash;
- the PV's nodeAffinity from the accessible topology.
"""

from __future__ import annotations

from typing import Any

import pytest

from kopf_csi.csi import messages as csi
from kopf_csi.provisioning import terms, topology
from kopf_csi.provisioning.states import ProvisioningState
from kopf_csi.provisioning.topology import TopologyError, TopologyMemo

from .factories import make_csinode, make_node

Z = "topology.hostpath.csi/zone"
R = "topology.hostpath.csi/rack"
NODES = [
    make_node("node-b", {Z: "b"}),
    make_node("node-a", {Z: "a", "other": "x"}),
    make_node("node-c", {Z: "c"}),
    make_node("node-a2", {Z: "a"}),
    make_node("no-zone", {}),
]
CSINODES = [make_csinode(n["metadata"]["name"], Z) for n in NODES[:4]] + [make_csinode("no-zone")]


def seg(*values: str) -> list[csi.Topology]:
    return [csi.Topology(segments={Z: v}) for v in values]


def allowed(*values: str, key: str = Z) -> list[dict[str, Any]]:
    return [{"matchLabelExpressions": [{"key": key, "values": list(values)}]}]


def generate(**kwargs: Any) -> topology.Accessibility:
    defaults: dict[str, Any] = {
        "driver_name": "hostpath.csi.k8s.io",
        "claim_name": "data",
        "allowed_topologies": None,
        "selected_node": "",
        "strict_topology": False,
        "immediate_topology": True,
        "csinodes": CSINODES,
        "nodes": NODES,
        "shuffle": lambda items: None,
        "random_hash": lambda: 0,
    }
    return topology.accessibility_requirements(**(defaults | kwargs))


def requirement(**kwargs: Any) -> csi.TopologyRequirement | None:
    return generate(**kwargs).requirement


@pytest.mark.parametrize(
    ("kwargs", "requisite", "preferred"),
    [
        pytest.param(
            {"selected_node": "node-b"},
            seg("a", "b", "c"),
            seg("b", "c", "a"),
            id="wffc -> cluster segments, node's first",
        ),
        pytest.param(
            {"selected_node": "node-a"},
            seg("a", "b", "c"),
            seg("a", "b", "c"),
            id="wffc duplicate zones -> one term each",
        ),
        pytest.param(
            {"selected_node": "node-c", "strict_topology": True},
            seg("c"),
            seg("c"),
            id="wffc strict -> only the node's segment",
        ),
        pytest.param(
            {
                "selected_node": "node-c",
                "strict_topology": True,
                "allowed_topologies": allowed("c", "b"),
            },
            seg("c"),
            seg("c"),
            id="wffc strict inside allowed -> only the node's",
        ),
        pytest.param(
            {"selected_node": "node-b", "allowed_topologies": allowed("c", "b")},
            seg("b", "c"),
            seg("b", "c"),
            id="wffc allowed -> allowed, node's first",
        ),
        pytest.param(
            {"selected_node": "node-c", "allowed_topologies": allowed("c", "a", "b")},
            seg("a", "b", "c"),
            seg("c", "a", "b"),
            id="wffc allowed unsorted -> sorted, rotated",
        ),
        pytest.param(
            {"claim_name": "", "allowed_topologies": allowed("b", "a")},
            seg("a", "b"),
            seg("a", "b"),
            id="immediate allowed -> allowed, sorted",
        ),
        pytest.param(
            {"claim_name": "", "random_hash": lambda: 1},
            seg("a", "b", "c"),
            seg("b", "c", "a"),
            id="immediate -> cluster segments, rotated by hash",
        ),
    ],
)
def test_requirements(
    kwargs: dict[str, Any], requisite: list[csi.Topology], preferred: list[csi.Topology]
) -> None:
    assert requirement(**kwargs) == csi.TopologyRequirement(
        requisite=requisite, preferred=preferred
    )


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({"immediate_topology": False}, id="immediate off, no allowed -> none"),
        pytest.param({"allowed_topologies": allowed()}, id="allowed without values -> none"),
        pytest.param(
            {"allowed_topologies": [{"matchLabelExpressions": []}]}, id="allowed empty term -> none"
        ),
    ],
)
def test_no_requirement(kwargs: dict[str, Any]) -> None:
    assert requirement(**kwargs) is None


def test_immediate_off_still_uses_allowed_topologies() -> None:
    result = requirement(immediate_topology=False, allowed_topologies=allowed("b"))
    assert result == csi.TopologyRequirement(requisite=seg("b"), preferred=seg("b"))


@pytest.mark.parametrize(
    ("claim_name", "shift"),
    [
        pytest.param(
            "data-web-0", terms.fnv1_32(b"web") % 3, id="statefulset ordinal 0 -> hash of set"
        ),
        pytest.param("data-web-1", (terms.fnv1_32(b"web") + 1) % 3, id="ordinal 1 -> next segment"),
        pytest.param(
            "logs-web-1", (terms.fnv1_32(b"web") + 1) % 3, id="other claim same pod -> same segment"
        ),
        pytest.param("plain", terms.fnv1_32(b"plain") % 3, id="no ordinal -> hash of whole name"),
        pytest.param("", 7 % 3, id="no name -> random hash"),
    ],
)
def test_immediate_preferred_is_rotated_by_statefulset_hash(claim_name: str, shift: int) -> None:
    result = requirement(claim_name=claim_name, random_hash=lambda: 7)
    ordered = seg("a", "b", "c")
    assert result == csi.TopologyRequirement(
        requisite=ordered, preferred=ordered[shift:] + ordered[:shift]
    )


def test_immediate_uses_the_first_csinode_with_keys_after_shuffling() -> None:
    csinodes = [make_csinode("node-a", R), make_csinode("node-b", Z)]
    nodes = [make_node("node-a", {R: "r1", Z: "a"}), make_node("node-b", {R: "r2", Z: "b"})]
    result = generate(csinodes=csinodes, nodes=nodes, shuffle=lambda items: items.reverse())
    assert result.requirement is not None
    assert result.requirement.requisite == seg("a", "b")
    assert result.memo.topology_keys == (Z,)


def test_multi_key_terms_sort_by_length_then_segments() -> None:
    csinodes = [make_csinode("n1", R, Z)]
    nodes = [make_node("n1", {Z: "b", R: "1"}), make_node("n2", {Z: "a", R: "2"})]
    result = requirement(csinodes=csinodes, nodes=nodes)
    assert result is not None
    assert [t.segments for t in result.requisite] == [{R: "1", Z: "b"}, {R: "2", Z: "a"}]


EXPECTED_ERRORS = [
    pytest.param(
        {"selected_node": "gone"},
        ProvisioningState.RESCHEDULE,
        'failed to get selected CSINode gone: csinode.storage.k8s.io "gone" not found',
        id="selected node without CSINode -> reschedule",
    ),
    pytest.param(
        {"selected_node": "no-zone"},
        ProvisioningState.NO_CHANGE,
        "error generating accessibility requirements: no topology key found for node no-zone",
        id="CSINode without our keys -> no change",
    ),
    pytest.param(
        {"selected_node": "node-a", "nodes": []},
        ProvisioningState.NO_CHANGE,
        "error generating accessibility requirements: topology labels from selected node map[]"
        f" does not match topology keys from CSINode [{Z}]",
        id="selected Node gone -> labels do not match",
    ),
    pytest.param(
        {"selected_node": "node-a", "nodes": [make_node("node-a", {"other": "x"})]},
        ProvisioningState.NO_CHANGE,
        "error generating accessibility requirements: topology labels from selected node map[]"
        f" does not match topology keys from CSINode [{Z}]",
        id="selected Node lacks the key -> labels do not match (Go prints no labels)",
    ),
    pytest.param(
        {
            "selected_node": "node-c",
            "strict_topology": True,
            "allowed_topologies": allowed("a", "b"),
        },
        ProvisioningState.NO_CHANGE,
        "error generating accessibility requirements: selected node '\"node-c\"' topology"
        f" '[{{{Z} c}}]' is not in allowed topologies: [[{{{Z} a}}] [{{{Z} b}}]]",
        id="strict node outside allowed -> not in allowed",
    ),
    pytest.param(
        {"selected_node": "node-c", "allowed_topologies": allowed("b", "a")},
        ProvisioningState.NO_CHANGE,
        f"error generating accessibility requirements: topology [{{{Z} c}}] from selected node"
        f' "node-c" is not in requisite: [[{{{Z} a}}] [{{{Z} b}}]]',
        id="node outside allowed -> not in requisite",
    ),
    pytest.param(
        {"csinodes": [make_csinode("x")]},
        ProvisioningState.NO_CHANGE,
        "error generating accessibility requirements: no available topology found",
        id="immediate without any registered keys -> no available topology",
    ),
    pytest.param(
        {"nodes": [make_node("node-a", {})]},
        ProvisioningState.NO_CHANGE,
        f"error generating accessibility requirements: topologyKeys [{Z}] were not found on any "
        "nodes",
        id="immediate keys on no node -> not found on any nodes",
    ),
]


@pytest.mark.parametrize(("kwargs", "state", "message"), EXPECTED_ERRORS)
def test_errors(kwargs: dict[str, Any], state: ProvisioningState, message: str) -> None:
    with pytest.raises(TopologyError) as info:
        generate(**kwargs)
    assert (info.value.state, str(info.value)) == (state, message)


def test_memo_survives_the_node_and_csinode_deletion() -> None:
    first = generate(selected_node="node-b")
    assert first.memo == TopologyMemo(
        topology_keys=(Z,),
        requisite_terms=(((Z, "b"),), ((Z, "a"),), ((Z, "c"),), ((Z, "a"),)),
        node_labels={Z: "b"},
    )
    retry = generate(selected_node="node-b", csinodes=[], nodes=[], memo=first.memo)
    assert retry.requirement == first.requirement
    assert retry.memo == first.memo


def test_memo_keeps_immediate_keys_across_shuffles() -> None:
    memo = TopologyMemo(topology_keys=(Z,))
    result = generate(csinodes=[make_csinode("n", R)], memo=memo)
    assert result.requirement is not None
    assert result.requirement.requisite == seg("a", "b", "c")


def test_error_still_returns_what_was_learnt() -> None:
    with pytest.raises(TopologyError) as info:
        generate(nodes=[])
    assert info.value.memo == TopologyMemo(topology_keys=(Z,))


@pytest.mark.parametrize(
    ("allowed_topologies", "expected"),
    [
        pytest.param(None, [], id="none -> no terms"),
        pytest.param(
            [
                {
                    "matchLabelExpressions": [
                        {"key": "zone", "values": ["z1", "z2"]},
                        {"key": "rack", "values": ["rA", "rB"]},
                    ]
                }
            ],
            [
                (("rack", "rA"), ("zone", "z1")),
                (("rack", "rA"), ("zone", "z2")),
                (("rack", "rB"), ("zone", "z1")),
                (("rack", "rB"), ("zone", "z2")),
            ],
            id="two keys two values -> four AND terms, sorted segments",
        ),
        pytest.param(
            [
                {"matchLabelExpressions": [{"key": "zone", "values": ["z1"]}]},
                {"matchLabelExpressions": [{"key": "zone", "values": ["z2"]}]},
            ],
            [(("zone", "z1"),), (("zone", "z2"),)],
            id="two selector terms -> OR-ed",
        ),
        pytest.param(
            [
                {
                    "matchLabelExpressions": [
                        {"key": "zone", "values": ["z1"]},
                        {"key": "rack", "values": []},
                        {"key": "row", "values": ["1"]},
                    ]
                }
            ],
            [(("row", "1"),)],
            id="empty values mid-term -> Go restarts the distribution",
        ),
    ],
)
def test_flatten(
    allowed_topologies: list[dict[str, Any]] | None, expected: list[terms.Term]
) -> None:
    assert terms.flatten(allowed_topologies) == expected


@pytest.mark.parametrize(
    ("term", "other", "expected"),
    [
        pytest.param((), ((Z, "a"),), True, id="empty -> subset of all"),
        pytest.param(((Z, "a"),), ((R, "1"), (Z, "a")), True, id="one key of two -> subset"),
        pytest.param(((Z, "b"),), ((R, "1"), (Z, "a")), False, id="other value -> not"),
        pytest.param(((R, "1"), (Z, "a")), ((Z, "a"),), False, id="more keys -> not"),
    ],
)
def test_subset(term: terms.Term, other: terms.Term, expected: bool) -> None:
    assert terms.subset(term, other) is expected


@pytest.mark.parametrize(
    ("name", "hashed", "index"),
    [
        pytest.param("data-web-3", "web", 3, id="claim-set-N -> set, N"),
        pytest.param("web-5", "web", 5, id="name-N -> name, N"),
        pytest.param("a-b-c", "a-b-c", 0, id="non-numeric suffix -> whole name"),
        pytest.param("x-4294967296", "x-4294967296", 0, id="ordinal beyond uint32 -> whole name"),
        pytest.param("x-+1", "x-+1", 0, id="signed ordinal -> whole name"),
        pytest.param("x-007", "x", 7, id="leading zeros -> parsed"),
    ],
)
def test_statefulset_hash(name: str, hashed: str, index: int) -> None:
    assert terms.statefulset_hash(name, lambda: 0) == (terms.fnv1_32(hashed.encode()), index)


@pytest.mark.parametrize(
    ("data", "expected"),
    [(b"", 0x811C9DC5), (b"a", 0x050C5D7E), (b"foobar", 0x31F0B262)],
    ids=["empty -> offset basis", "a -> FNV-1 vector", "foobar -> FNV-1 vector"],
)
def test_fnv1_32(data: bytes, expected: int) -> None:
    assert terms.fnv1_32(data) == expected


@pytest.mark.parametrize(
    ("accessible", "expected"),
    [
        pytest.param([], None, id="no topology -> no affinity"),
        pytest.param([csi.Topology(segments={})], None, id="only empty segments -> no affinity"),
        pytest.param(
            [
                csi.Topology(segments={Z: "a", R: "1"}),
                csi.Topology(segments={}),
                csi.Topology(segments={Z: "b"}),
            ],
            {
                "required": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": R, "operator": "In", "values": ["1"]},
                                {"key": Z, "operator": "In", "values": ["a"]},
                            ]
                        },
                        {"matchExpressions": [{"key": Z, "operator": "In", "values": ["b"]}]},
                    ]
                }
            },
            id="segments -> one term each, keys In [value], empty skipped",
        ),
    ],
)
def test_node_affinity(accessible: list[csi.Topology], expected: dict[str, Any] | None) -> None:
    assert topology.node_affinity(accessible) == expected


def test_supports_topology() -> None:
    assert topology.supports_topology({"CONTROLLER_SERVICE", "VOLUME_ACCESSIBILITY_CONSTRAINTS"})
    assert not topology.supports_topology({"CONTROLLER_SERVICE"})
