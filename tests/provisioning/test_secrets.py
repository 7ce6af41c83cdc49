"""Secret references from StorageClass parameters, exactly as external-provisioner resolves them.

We test these aspects:
- the per-call keys, the deprecated keys, and the fallback to `csi.storage.k8s.io/secret-*`;
- which tokens each template may use: namespace `${pv.name}`/`${pvc.namespace}` only, name
  also `${pvc.name}` and `${pvc.annotations['KEY']}`;
- every configuration error and every invalid result, with the Go sidecar's exact message;
- all the refs at once leave the claim unchanged (`NO_CHANGE`) on any error;
- the DeleteVolume secret: from the PV annotations, else re-resolved from the StorageClass.
"""

from __future__ import annotations

from typing import Any

import pytest

from kopf_csi.provisioning import secrets
from kopf_csi.provisioning.errors import ProvisioningError
from kopf_csi.provisioning.secrets import SecretRef
from kopf_csi.provisioning.states import ProvisioningState

from .factories import PV_NAME, make_claim, make_class, make_volume

P = "csi.storage.k8s.io/"
NAME_TEMPLATE = "${pvc.name}-${pvc.annotations['example.com/secret']}"
CLAIM = make_claim(
    name="data", namespace="team", annotations={"example.com/secret": "from-annotation"}
)


@pytest.mark.parametrize(
    ("keys", "params", "expected"),
    [
        pytest.param(secrets.PROVISIONER, {}, None, id="nothing configured -> no secret"),
        pytest.param(
            secrets.PROVISIONER,
            {f"{P}provisioner-secret-name": "s", f"{P}provisioner-secret-namespace": "ns"},
            SecretRef("s", "ns"),
            id="literal per-call keys -> that secret",
        ),
        pytest.param(
            secrets.PROVISIONER,
            {f"{P}secret-name": "d", f"{P}secret-namespace": "dns"},
            SecretRef("d", "dns"),
            id="only the default keys -> the default secret",
        ),
        pytest.param(
            secrets.NODE_STAGE,
            {
                f"{P}secret-name": "d",
                f"{P}secret-namespace": "dns",
                f"{P}node-stage-secret-name": "s",
                f"{P}node-stage-secret-namespace": "ns",
            },
            SecretRef("s", "ns"),
            id="per-call and default keys -> per-call wins",
        ),
        pytest.param(
            secrets.PROVISIONER,
            {"csiProvisionerSecretName": "old", "csiProvisionerSecretNamespace": "ons"},
            SecretRef("old", "ons"),
            id="deprecated keys -> still honoured",
        ),
        pytest.param(
            secrets.NODE_PUBLISH,
            {
                f"{P}node-publish-secret-name": NAME_TEMPLATE,
                f"{P}node-publish-secret-namespace": "${pvc.namespace}",
            },
            SecretRef("data-from-annotation", "team"),
            id="name and namespace templates -> resolved against the claim",
        ),
        pytest.param(
            secrets.CONTROLLER_EXPAND,
            {
                f"{P}controller-expand-secret-name": "${pv.name}",
                f"{P}controller-expand-secret-namespace": "${pv.name}",
            },
            SecretRef(PV_NAME, PV_NAME),
            id="pv.name in both templates -> the PV name",
        ),
        pytest.param(
            secrets.CONTROLLER_MODIFY,
            {
                f"{P}controller-modify-secret-name": "m",
                f"{P}controller-modify-secret-namespace": "mns",
            },
            SecretRef("m", "mns"),
            id="controller-modify keys -> the modify secret",
        ),
        pytest.param(
            secrets.NODE_EXPAND,
            {"csiNodeExpandSecretName": "x", "csiNodeExpandSecretNamespace": "y"},
            None,
            id="a deprecated-looking key expand never had -> ignored",
        ),
    ],
)
def test_secret_reference(
    keys: secrets.SecretKeys, params: dict[str, str], expected: SecretRef | None
) -> None:
    assert secrets.secret_reference(keys, params, volume_name=PV_NAME, claim=CLAIM) == expected


@pytest.mark.parametrize(
    ("params", "message"),
    [
        pytest.param(
            {
                "csiProvisionerSecretName": "a",
                f"{P}provisioner-secret-name": "b",
                f"{P}provisioner-secret-namespace": "ns",
            },
            "failed to get name and namespace template from params: Provisioner secrets"
            ' specified in parameters with both "csi" and "csi.storage.k8s.io/" keys',
            id="deprecated and new name keys -> both-keys error",
        ),
        pytest.param(
            {f"{P}provisioner-secret-name": "a"},
            "failed to get name and namespace template from params: either name and namespace"
            " for Provisioner secrets specified, Both must be specified",
            id="name without namespace -> both-required error",
        ),
        pytest.param(
            {f"{P}provisioner-secret-name": "", f"{P}provisioner-secret-namespace": "ns"},
            "failed to get name and namespace template from params: Provisioner secrets"
            " specified in parameters but value of either namespace or name is empty",
            id="empty name value -> empty-value error",
        ),
        pytest.param(
            {f"{P}secret-namespace": "ns"},
            "failed to get default name and namespace template from params: either name and"
            " namespace for Default secrets specified, Both must be specified",
            id="half a default pair -> default-prefixed error",
        ),
        pytest.param(
            {f"{P}provisioner-secret-name": "a", f"{P}provisioner-secret-namespace": "${pvc.name}"},
            'error resolving value "${pvc.name}": invalid tokens: ["pvc.name"]',
            id="pvc.name in the namespace -> not allowed there",
        ),
        pytest.param(
            {
                f"{P}provisioner-secret-name": "a",
                f"{P}provisioner-secret-namespace": "${pvc.annotations['example.com/secret']}",
            },
            "error resolving value \"${pvc.annotations['example.com/secret']}\": invalid tokens:"
            " [\"pvc.annotations['example.com/secret']\"]",
            id="annotation in the namespace -> not allowed there",
        ),
        pytest.param(
            {
                f"{P}provisioner-secret-name": "${pvc.annotations['missing']}",
                f"{P}provisioner-secret-namespace": "ns",
            },
            "error resolving value \"${pvc.annotations['missing']}\": invalid tokens:"
            " [\"pvc.annotations['missing']\"]",
            id="absent annotation -> invalid token",
        ),
        pytest.param(
            {f"{P}provisioner-secret-name": "a", f"{P}provisioner-secret-namespace": "Bad_NS"},
            '"Bad_NS" is not a valid namespace name',
            id="literal bad namespace -> not valid",
        ),
        pytest.param(
            {
                f"{P}provisioner-secret-name": "a",
                f"{P}provisioner-secret-namespace": "x.${pv.name}",
            },
            f'"x.${{pv.name}}" resolved to "x.{PV_NAME}" which is not a valid namespace name',
            id="namespace resolving to a dotted name -> resolved-to error",
        ),
        pytest.param(
            {f"{P}provisioner-secret-name": "UPPER", f"{P}provisioner-secret-namespace": "ns"},
            '"UPPER" is not a valid secret name',
            id="literal bad name -> not valid",
        ),
        pytest.param(
            {
                f"{P}provisioner-secret-name": "${pvc.name}_x",
                f"{P}provisioner-secret-namespace": "ns",
            },
            '"${pvc.name}_x" resolved to "data_x" which is not a valid secret name',
            id="name resolving to an underscore -> resolved-to error",
        ),
    ],
)
def test_secret_reference_errors(params: dict[str, str], message: str) -> None:
    with pytest.raises(secrets.SecretReferenceError) as info:
        secrets.secret_reference(secrets.PROVISIONER, params, volume_name=PV_NAME, claim=CLAIM)
    assert str(info.value) == message


def test_all_references_at_once() -> None:
    params = {
        f"{P}secret-name": "d",
        f"{P}secret-namespace": "dns",
        f"{P}node-publish-secret-name": "np",
        f"{P}node-publish-secret-namespace": "npns",
    }
    refs = secrets.secret_references(params, volume_name=PV_NAME, claim=CLAIM)
    default = SecretRef("d", "dns")
    assert refs == secrets.SecretReferences(
        provisioner=default,
        controller_publish=default,
        node_stage=default,
        node_publish=SecretRef("np", "npns"),
        controller_expand=default,
        node_expand=default,
        controller_modify=default,
    )


def test_bad_reference_leaves_the_claim_unchanged() -> None:
    params = {f"{P}node-stage-secret-name": "only-name"}
    with pytest.raises(ProvisioningError) as info:
        secrets.secret_references(params, volume_name=PV_NAME, claim=CLAIM)
    assert info.value.state is ProvisioningState.NO_CHANGE
    assert "NodeStage secrets specified" in str(info.value)


ANN_NAME = "volume.kubernetes.io/provisioner-deletion-secret-name"
ANN_NS = "volume.kubernetes.io/provisioner-deletion-secret-namespace"
CLAIM_REF = {"name": "data", "namespace": "team"}
TEMPLATED = make_class(
    parameters={
        f"{P}provisioner-secret-name": "${pvc.name}-creds",
        f"{P}provisioner-secret-namespace": "${pvc.namespace}",
    }
)


@pytest.mark.parametrize(
    ("volume", "storage_class", "expected"),
    [
        pytest.param(
            make_volume(annotations={ANN_NAME: "s", ANN_NS: "ns"}, claim_ref=CLAIM_REF),
            TEMPLATED,
            SecretRef("s", "ns"),
            id="annotations set -> they win over the class",
        ),
        pytest.param(
            make_volume(annotations={ANN_NAME: "", ANN_NS: ""}, claim_ref=CLAIM_REF),
            TEMPLATED,
            None,
            id="empty annotations -> no secret needed",
        ),
        pytest.param(
            make_volume(annotations={ANN_NAME: "s", ANN_NS: ""}, claim_ref=CLAIM_REF),
            TEMPLATED,
            None,
            id="half-empty annotations -> no secret, no class fallback",
        ),
        pytest.param(
            make_volume(annotations={}, claim_ref=CLAIM_REF),
            TEMPLATED,
            SecretRef("data-creds", "team"),
            id="no annotations -> re-resolved from the class and claimRef",
        ),
        pytest.param(
            make_volume(annotations={ANN_NAME: "s"}, claim_ref=CLAIM_REF),
            TEMPLATED,
            SecretRef("data-creds", "team"),
            id="only one annotation -> treated as absent",
        ),
        pytest.param(
            make_volume(annotations={}, claim_ref=CLAIM_REF),
            None,
            None,
            id="no annotations, class gone -> no secret",
        ),
        pytest.param(make_volume(annotations={}), TEMPLATED, None, id="no claimRef -> no secret"),
    ],
)
def test_deletion_secret_reference(
    volume: dict[str, Any], storage_class: dict[str, Any] | None, expected: SecretRef | None
) -> None:
    assert secrets.deletion_secret_reference(volume, storage_class=storage_class) == expected


def test_deletion_secret_cannot_use_claim_annotations() -> None:
    storage_class = make_class(
        parameters={
            f"{P}provisioner-secret-name": "${pvc.annotations['example.com/secret']}",
            f"{P}provisioner-secret-namespace": "ns",
        }
    )
    volume = make_volume(claim_ref=CLAIM_REF)
    with pytest.raises(secrets.SecretReferenceError) as info:
        secrets.deletion_secret_reference(volume, storage_class=storage_class)
    assert str(info.value) == (
        f"failed to get secretreference for volume {PV_NAME}: error resolving value"
        " \"${pvc.annotations['example.com/secret']}\": invalid tokens:"
        " [\"pvc.annotations['example.com/secret']\"]"
    )


def test_secret_ref_as_dict() -> None:
    assert SecretRef("s", "ns").as_dict() == {"name": "s", "namespace": "ns"}
