"""Whether to provision a claim: the library's `shouldProvision` plus the sidecar's qualifier.

We test these aspects:
- the storage-provisioner annotation (GA, else beta) or `migrated-to` must name our driver;
- extra known names (a migrated in-tree plugin) are accepted;
- bound claims, WaitForFirstConsumer without a (GA) selected node, an existing PV and a class
  of another provisioner are all skipped; a missing class is an error to retry;
- the selected node (GA, else alpha), the reschedule condition and the node errors;
- the event messages of an attempt and of a success.
"""

from __future__ import annotations

from typing import Any

import pytest

from kopf_csi.provisioning import decisions
from kopf_csi.provisioning.errors import ProvisioningError
from kopf_csi.provisioning.states import ProvisioningState

from .factories import DRIVER, make_claim, make_class

GA = "volume.kubernetes.io/storage-provisioner"
BETA = "volume.beta.kubernetes.io/storage-provisioner"
MIGRATED = "pv.kubernetes.io/migrated-to"
SELECTED = "volume.kubernetes.io/selected-node"
ALPHA = "volume.alpha.kubernetes.io/selected-node"
WFFC = make_class(binding="WaitForFirstConsumer")


@pytest.mark.parametrize(
    ("claim", "storage_class", "kwargs", "expected"),
    [
        pytest.param(make_claim(), make_class(), {}, True, id="annotated for us -> provision"),
        pytest.param(
            make_claim(annotations={BETA: DRIVER}),
            make_class(),
            {},
            True,
            id="beta annotation only -> provision",
        ),
        pytest.param(
            make_claim(annotations={GA: "other", BETA: DRIVER}),
            make_class(),
            {},
            False,
            id="GA for other, beta for us -> GA wins, skip",
        ),
        pytest.param(
            make_claim(annotations={GA: "other"}),
            make_class(),
            {},
            False,
            id="another provisioner -> skip",
        ),
        pytest.param(
            make_claim(annotations={}), make_class(), {}, False, id="no annotation -> skip"
        ),
        pytest.param(
            make_claim(annotations={MIGRATED: DRIVER}),
            make_class(),
            {},
            False,
            id="migrated-to only, no provisioner annotation -> skip",
        ),
        pytest.param(
            make_claim(annotations={GA: "kubernetes.io/gce-pd", MIGRATED: DRIVER}),
            make_class(provisioner="kubernetes.io/gce-pd"),
            {"known_names": {"kubernetes.io/gce-pd"}},
            True,
            id="migrated in-tree claim, name known -> provision",
        ),
        pytest.param(
            make_claim(annotations={GA: "kubernetes.io/gce-pd", MIGRATED: DRIVER}),
            make_class(),
            {},
            False,
            id="migrated in-tree claim, name unknown -> skip",
        ),
        pytest.param(
            make_claim(spec={"volumeName": "pv-1"}),
            make_class(),
            {},
            False,
            id="already bound -> skip",
        ),
        pytest.param(make_claim(), WFFC, {}, False, id="wffc without selected node -> wait"),
        pytest.param(
            make_claim(annotations={GA: DRIVER, SELECTED: ""}),
            WFFC,
            {},
            False,
            id="wffc with empty selected node -> wait",
        ),
        pytest.param(
            make_claim(annotations={GA: DRIVER, ALPHA: "node-1"}),
            WFFC,
            {},
            False,
            id="wffc with only the alpha key -> wait",
        ),
        pytest.param(
            make_claim(annotations={GA: DRIVER, SELECTED: "node-1"}),
            WFFC,
            {},
            True,
            id="wffc with selected node -> provision",
        ),
        pytest.param(
            make_claim(), make_class(binding="Immediate"), {}, True, id="immediate -> provision"
        ),
        pytest.param(
            make_claim(), make_class(), {"volume_exists": True}, False, id="PV exists -> stop"
        ),
        pytest.param(
            make_claim(),
            make_class(provisioner="other"),
            {},
            False,
            id="class of another provisioner -> stop",
        ),
    ],
)
def test_should_provision(
    claim: dict[str, Any], storage_class: dict[str, Any], kwargs: dict[str, Any], expected: bool
) -> None:
    decision = decisions.should_provision(claim, storage_class, driver_name=DRIVER, **kwargs)
    assert bool(decision) is expected
    assert decision.reason


def test_missing_class_is_an_error_to_retry() -> None:
    with pytest.raises(ProvisioningError) as info:
        decisions.should_provision(make_claim(), None, driver_name=DRIVER)
    assert (str(info.value), info.value.state) == (
        'storageClass "fast" not found',
        ProvisioningState.NO_CHANGE,
    )


def test_missing_class_does_not_matter_for_other_claims() -> None:
    assert not decisions.should_provision(
        make_claim(annotations={GA: "x"}), None, driver_name=DRIVER
    )


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        pytest.param({}, None, id="none -> none"),
        pytest.param({SELECTED: "n1"}, "n1", id="GA -> it"),
        pytest.param({ALPHA: "n2"}, "n2", id="alpha -> fallback"),
        pytest.param({SELECTED: "n1", ALPHA: "n2"}, "n1", id="both -> GA"),
        pytest.param({SELECTED: "", ALPHA: "n2"}, "", id="empty GA -> present, wins"),
    ],
)
def test_selected_node(annotations: dict[str, str], expected: str | None) -> None:
    assert decisions.selected_node(make_claim(annotations=annotations)) == expected


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        pytest.param({GA: "a", BETA: "b"}, "a", id="both -> GA"),
        pytest.param({BETA: "b"}, "b", id="beta only -> beta"),
        pytest.param({}, None, id="none -> none"),
    ],
)
def test_provisioner_annotation(annotations: dict[str, str], expected: str | None) -> None:
    assert decisions.provisioner_annotation(make_claim(annotations=annotations)) == expected


@pytest.mark.parametrize(
    ("supports", "node", "expected"),
    [
        pytest.param(True, "n1", True, id="topology and node -> may reschedule"),
        pytest.param(False, "n1", False, id="no topology -> cannot"),
        pytest.param(True, None, False, id="no node -> cannot"),
        pytest.param(True, "", False, id="empty node -> cannot"),
    ],
)
def test_may_reschedule(supports: bool, node: str | None, expected: bool) -> None:
    assert decisions.may_reschedule(supports_topology=supports, selected_node=node) is expected


def test_node_errors() -> None:
    missing = decisions.missing_node_error("node-1")
    assert (str(missing), missing.state) == (
        'node "node-1" not found',
        ProvisioningState.RESCHEDULE,
    )
    failed = decisions.node_lookup_error("etcdserver: request timed out")
    assert (str(failed), failed.state) == (
        "failed to get target node: etcdserver: request timed out",
        ProvisioningState.NO_CHANGE,
    )


def test_event_messages() -> None:
    assert decisions.provisioning_message(make_claim(name="data", namespace="team")) == (
        'External provisioner is provisioning volume for claim "team/data"'
    )
    assert decisions.succeeded_message("pvc-1") == "Successfully provisioned volume pvc-1"
    assert decisions.claim_key({"metadata": {"name": "x"}}) == "x"
