"""Properties of the provisioner's pure functions over hostile but well-typed objects.

We test these aspects:
- `should_provision`, `plan_request`, `secret_references` and `build_create_request` either
  answer or raise the provisioner's own errors (which become events), for any claim and class;
  a request they build is sane: the planned name, a non-negative size, only driver parameters;
- quantities: every int64 survives `format_binary_si` → `quantity_bytes`; any text parses or
  raises `QuantityError`; a claim's size is never negative;
- templates: any template resolves or raises `TemplateError`; text without `$` is itself;
- the driver's answer: `response_problem` accepts exactly the usable volumes (an id, a
  capacity of 0 or at least the request, a topology inside the requisite), and `build_volume`
  turns every accepted one into a JSON-serialisable PV whose capacity parses back.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import assume, given
from hypothesis import strategies as st

from kopf_csi import names
from kopf_csi.csi import messages as csi
from kopf_csi.provisioning import decisions, parameters, requests, secrets, templates, topology
from kopf_csi.provisioning.errors import ProvisioningError
from kopf_csi.provisioning.options import ProvisionerOptions
from kopf_csi.provisioning.quantities import (
    MAX_INT64,
    QuantityError,
    format_binary_si,
    quantity_bytes,
)
from kopf_csi.provisioning.volumes import build_volume, response_problem

from .strategies import (
    CLAIMS,
    DRIVER,
    INT64,
    PARAMETERS,
    QUANTITY,
    STORAGE_CLASSES,
    TEMPLATE,
    TEXT,
    TOPOLOGIES,
    VOLUMES,
)

OPTIONS = ProvisionerOptions()
PLUGIN = ("CONTROLLER_SERVICE", "VOLUME_ACCESSIBILITY_CONSTRAINTS")
CONTROLLER = ("CREATE_DELETE_VOLUME", "CREATE_DELETE_SNAPSHOT", "CLONE_VOLUME", "MODIFY_VOLUME")


def build(claim: dict[str, Any], storage_class: dict[str, Any]) -> csi.CreateVolumeRequest:
    """Everything the provisioner does to a claim without I/O, in its order."""
    plan = requests.plan_request(
        claim,
        storage_class,
        options=OPTIONS,
        plugin_capabilities=PLUGIN,
        controller_capabilities=CONTROLLER,
    )
    secrets.secret_references(
        storage_class.get("parameters"), volume_name=plan.volume_name, claim=claim
    )
    vac = {"driverName": DRIVER, "parameters": {"a": "b"}} if plan.volume_attributes_class else None
    request = requests.build_create_request(
        plan,
        claim=claim,
        storage_class=storage_class,
        options=OPTIONS,
        driver_name=DRIVER,
        secrets={"k": "v"},
        volume_attributes_class=vac,
    )
    assert request.name == plan.volume_name
    assert request.capacity_range is not None
    assert 0 <= request.capacity_range.required_bytes <= MAX_INT64
    assert not any(key.startswith(names.PARAMETER_PREFIX) for key in request.parameters)
    assert len(request.volume_capabilities) == len(claim["spec"].get("accessModes") or ())
    return request


@given(claim=CLAIMS, storage_class=st.one_of(st.none(), STORAGE_CLASSES))
def test_deciding_answers_or_raises_a_provisioning_error(
    claim: dict[str, Any], storage_class: dict[str, Any] | None
) -> None:
    try:
        decision = decisions.should_provision(claim, storage_class, driver_name=DRIVER)
    except ProvisioningError as exc:
        error = exc
    else:
        assert decision.reason
        return
    assert storage_class is None
    assert error.message.startswith("storageClass ")


@given(claim=CLAIMS, storage_class=STORAGE_CLASSES)
def test_building_the_request_answers_or_raises_a_provisioning_error(
    claim: dict[str, Any], storage_class: dict[str, Any]
) -> None:
    error: ProvisioningError | None = None
    try:
        build(claim, storage_class)
    except ProvisioningError as exc:  # IgnoredError included: a populator's claim
        error = exc
    if error is not None:
        assert error.message
        assert error.state is not None


@given(params=PARAMETERS)
def test_driver_parameters_never_carry_reserved_keys(params: dict[str, str]) -> None:
    reserved = [k for k in params if k.startswith(names.PARAMETER_PREFIX)]
    unknown = [k for k in reserved if k not in names.RESERVED_PARAMETERS]
    try:
        result = parameters.driver_parameters(params)
    except ProvisioningError as exc:
        error = exc.message
    else:
        error = ""
        assert result == {k: v for k, v in params.items() if k not in reserved}
    assert bool(error) == bool(unknown)


@given(INT64)
def test_every_int64_capacity_round_trips(value: int) -> None:
    assert quantity_bytes(format_binary_si(value)) == value


@given(st.one_of(QUANTITY, TEXT))
def test_any_quantity_text_parses_or_is_refused(text: str) -> None:
    try:
        value = quantity_bytes(text)
    except QuantityError:
        return
    assert -MAX_INT64 - 1 <= value <= MAX_INT64


@given(QUANTITY)
def test_a_claims_size_is_never_negative(quantity: str) -> None:
    claim = {"spec": {"resources": {"requests": {"storage": quantity}}}}
    try:
        size = requests.requested_bytes(claim)
    except ProvisioningError:
        return
    assert size >= 0


@given(
    template=st.one_of(TEMPLATE, TEXT),
    params=st.dictionaries(st.one_of(st.sampled_from(["pvc.name", "pv.name", "a"]), TEXT), TEXT),
)
def test_templates_resolve_or_fail_cleanly(template: str, params: dict[str, str]) -> None:
    try:
        resolved = templates.resolve_template(template, params)
    except templates.TemplateError as exc:
        resolved = str(exc)
        assert "$" in template
        assert resolved.startswith("invalid tokens: ")
    if "$" not in template:
        assert resolved == template


@given(
    volume=VOLUMES,
    claim=CLAIMS,
    storage_class=STORAGE_CLASSES,
    required=st.integers(min_value=0, max_value=MAX_INT64),
    requisite=TOPOLOGIES,
)
def test_only_usable_volumes_become_persistent_volumes(
    volume: csi.Volume,
    claim: dict[str, Any],
    storage_class: dict[str, Any],
    required: int,
    requisite: list[csi.Topology],
) -> None:
    claim["spec"].pop("dataSource", None)
    requirement = csi.TopologyRequirement(requisite=requisite, preferred=requisite)
    problem = response_problem(
        volume, claim=claim, required_bytes=required, requirement=requirement
    )
    usable = (
        bool(volume.volume_id)
        and (volume.capacity_bytes == 0 or volume.capacity_bytes >= required)
        and _inside(volume.accessible_topology, requisite)
    )
    assert (problem is None) == usable
    if problem is not None:
        assert problem.message
        assert problem.deletable == bool(volume.volume_id)
        return
    try:
        plan = requests.plan_request(
            claim,
            storage_class,
            options=OPTIONS,
            plugin_capabilities=PLUGIN,
            controller_capabilities=CONTROLLER,
        )
        refs = secrets.secret_references(
            storage_class.get("parameters"), volume_name=plan.volume_name, claim=claim
        )
    except ProvisioningError:
        assume(False)
        return
    pv = build_volume(
        claim=claim,
        storage_class=storage_class,
        plan=plan,
        volume=volume,
        secrets=refs,
        driver_name=DRIVER,
        identity="1-2-" + DRIVER,
        options=OPTIONS,
        supports_topology=True,
    )
    json.dumps(pv)
    capacity = quantity_bytes(pv["spec"]["capacity"]["storage"])
    assert capacity == (volume.capacity_bytes or plan.required_bytes)
    assert pv["spec"]["csi"]["volumeHandle"] == volume.volume_id
    affinity = topology.node_affinity(volume.accessible_topology)
    assert pv["spec"].get("nodeAffinity") == affinity


def _inside(accessible: list[csi.Topology], requisite: list[csi.Topology]) -> bool:
    """The model: no requisite or no answer, or one answer agreeing with one requisite segment."""
    if not requisite or not accessible:
        return True
    for given_ in accessible:
        for wanted in requisite:
            shared = set(given_.segments) & set(wanted.segments)
            if all(given_.segments[key] == wanted.segments[key] for key in shared):
                return True
    return False
