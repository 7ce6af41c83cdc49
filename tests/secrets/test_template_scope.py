"""A claim cannot make the provisioner read a Secret in a namespace its StorageClass did not allow.

As in external-provisioner, for every secret kind: the namespace template may use `${pv.name}`
and `${pvc.namespace}` (neither under the claim owner's control) and nothing else; the name
template may also use the claim's name and annotations, and its result must be a DNS-1123
subdomain (no `/`, so no namespace smuggled in). We test these aspects:

- per kind: `${pvc.name}` or an annotation in the namespace template is an error; a literal or
  `${pvc.namespace}` namespace is used as the class says;
- property: whatever the claim's name and annotations, the resolved namespace is the same
  (only the class, the PV name and the claim's own namespace decide it), and a name resolved
  from user input never contains a namespace;
- end to end: a claim whose annotation names "kube-system/creds" gets a clear event, and the
  provisioner never reads a secret outside the namespace the class allows.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kopf_csi import names
from kopf_csi.provisioning import secrets
from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.operator import OperatorThread

from ..properties import profile
from ..provisioner.conftest import make_claim, make_storage_class, wait_for_event
from .conftest import CREDENTIALS, make_secret

profile.load()

KINDS = [pytest.param(keys, id=keys.call) for keys in secrets.ALL_CALLS]
PV = "pvc-0123"


def claim(
    name: str = "data", namespace: str = "team-a", annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace, "annotations": annotations or {}}}


def parameters(keys: secrets.SecretKeys, name: str, namespace: str) -> dict[str, str]:
    return {keys.name_key: name, keys.namespace_key: namespace}


@pytest.mark.parametrize("keys", KINDS)
@pytest.mark.parametrize(
    "template", ["${pvc.name}", "${pvc.annotations['ns']}", "x-${pvc.name}", "$pvc"]
)
def test_user_controlled_tokens_are_refused_in_the_namespace(
    keys: secrets.SecretKeys, template: str
) -> None:
    with pytest.raises(secrets.SecretReferenceError, match="invalid tokens"):
        secrets.secret_reference(
            keys,
            parameters(keys, "creds", template),
            volume_name=PV,
            claim=claim(annotations={"ns": "kube-system"}),
        )


@pytest.mark.parametrize("keys", KINDS)
@pytest.mark.parametrize(
    ("template", "expected"),
    [("${pvc.namespace}", "team-a"), ("kube-system", "kube-system"), ("${pv.name}", PV)],
)
def test_the_namespace_is_what_the_class_says(
    keys: secrets.SecretKeys, template: str, expected: str
) -> None:
    ref = secrets.secret_reference(
        keys, parameters(keys, "creds", template), volume_name=PV, claim=claim()
    )
    assert ref == secrets.SecretRef("creds", expected)


@pytest.mark.parametrize("keys", KINDS)
@pytest.mark.parametrize("smuggled", ["kube-system/creds", "../creds", "creds/..", "CREDS"])
def test_a_name_from_an_annotation_cannot_carry_a_namespace(
    keys: secrets.SecretKeys, smuggled: str
) -> None:
    with pytest.raises(secrets.SecretReferenceError, match="not a valid secret name"):
        secrets.secret_reference(
            keys,
            parameters(keys, "${pvc.annotations['secret']}", "${pvc.namespace}"),
            volume_name=PV,
            claim=claim(annotations={"secret": smuggled}),
        )


TEXT = st.text(max_size=40)
ANNOTATIONS = st.dictionaries(st.text(max_size=30), TEXT, max_size=5)
NAME_TEMPLATES = st.sampled_from(
    ["${pvc.name}", "${pvc.annotations['s']}", "${pvc.name}-${pvc.namespace}", "fixed", "$pvc.x"]
)
NAMESPACE_TEMPLATES = st.sampled_from(
    ["${pvc.namespace}", "${pv.name}", "kube-system", "${pvc.name}", "ns-${pvc.namespace}"]
)


@given(
    keys=st.sampled_from(secrets.ALL_CALLS),
    name_template=NAME_TEMPLATES,
    namespace_template=NAMESPACE_TEMPLATES,
    first=st.tuples(TEXT, ANNOTATIONS),
    second=st.tuples(TEXT, ANNOTATIONS),
)
def test_the_claims_name_and_annotations_never_move_the_namespace(
    keys: secrets.SecretKeys,
    name_template: str,
    namespace_template: str,
    first: tuple[str, dict[str, str]],
    second: tuple[str, dict[str, str]],
) -> None:
    params = parameters(keys, name_template, namespace_template)
    outcomes = []
    for name, claim_annotations in (first, second):
        try:
            ref = secrets.secret_reference(
                keys, params, volume_name=PV, claim=claim(name, "team-a", claim_annotations)
            )
        except secrets.SecretReferenceError as exc:
            text = str(exc)
            about_namespace = text.endswith("not a valid namespace name") or text.startswith(
                f"error resolving value {json.dumps(namespace_template)}"
            )
            outcomes.append(("error", "namespace" if about_namespace else "name"))
            continue
        assert ref is not None
        assert "/" not in ref.name
        assert ref.namespace in ("team-a", PV, "kube-system", "ns-team-a")
        outcomes.append(("namespace", ref.namespace))
    namespaces = {value for kind, value in outcomes if kind == "namespace"}
    assert len(namespaces) <= 1
    # A namespace error depends only on the class: it is the same for both claims.
    assert (("error", "namespace") in outcomes) == (outcomes.count(("error", "namespace")) == 2)


@pytest.mark.usefixtures("kcm")
async def test_a_claim_cannot_reach_a_secret_in_another_namespace(
    cluster: EmulatedCluster,
    operator: OperatorThread,
    secrets_seen: list[tuple[str, dict[str, str]]],
) -> None:
    make_secret(cluster, "creds", CREDENTIALS, namespace="kube-system")  # not the claim's
    params = {
        names.PARAM_PROVISIONER_SECRET_NAME: "${pvc.annotations['example.com/secret']}",
        names.PARAM_PROVISIONER_SECRET_NAMESPACE: "${pvc.namespace}",
    }
    await make_storage_class(cluster, operator, parameters=params)
    smuggling = make_claim(cluster, "a", annotations={"example.com/secret": "kube-system/creds"})
    plain = make_claim(cluster, "b", annotations={"example.com/secret": "creds"})
    await wait_for_event(
        cluster, smuggling, names.REASON_PROVISIONING_FAILED,
        message=lambda text: "which is not a valid secret name" in text,
    )  # fmt: skip
    await wait_for_event(
        cluster, plain, names.REASON_PROVISIONING_FAILED,
        message='error getting secret creds in namespace default: secrets "creds" not found',
    )  # fmt: skip
    assert not [s for m, s in secrets_seen if m == "CreateVolume"]  # nothing reached the driver
