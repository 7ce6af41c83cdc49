"""Secrets from StorageClass templates, end to end: to the driver, onto the PV, back at delete.

We test these aspects:
- the templates `${pvc.name}`, `${pvc.namespace}`, `${pv.name}` and `${pvc.annotations['KEY']}`
  resolve per claim; the provisioner secret's data reaches CreateVolume (the driver refuses a
  call without it), and the other five references are written onto the PV's `spec.csi`;
- the PV carries the deletion-secret annotations, and DeleteVolume gets the same secret's data;
- a PV without them carries empty ones, and DeleteVolume goes without secrets;
- a provisioner secret that does not exist yet: the Go message, then provisioned once it does;
- a bad template or secret parameter: a ProvisioningFailed event with the Go message, the
  claim stays Pending and is retried, nothing is created; fixing the class provisions it.
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Mapping

import pytest

from kopf_csi import names
from kopf_csi.driver import Driver, DriverConfig, SecretsPolicy
from kopf_csi.driver.volumes import VolumeRequest
from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.operator import OperatorThread
from kopf_csi.testing.spies import Calls

from .conftest import (
    NAMESPACE,
    events_for,
    make_claim,
    make_storage_class,
    volume_name,
    wait_for_bound,
    wait_for_event,
    wait_for_gone,
    wait_until,
)

pytestmark = pytest.mark.usefixtures("kcm")

CREDENTIALS = {"user": "admin", "password": "s3cret"}
TEMPLATED = {
    names.PARAM_PROVISIONER_SECRET_NAME: "${pvc.name}-prov",
    names.PARAM_PROVISIONER_SECRET_NAMESPACE: "${pvc.namespace}",
    names.PARAM_CONTROLLER_PUBLISH_SECRET_NAME: "${pv.name}",
    names.PARAM_CONTROLLER_PUBLISH_SECRET_NAMESPACE: "${pvc.namespace}",
    names.PARAM_NODE_STAGE_SECRET_NAME: "${pvc.annotations['example.com/team']}-stage",
    names.PARAM_NODE_STAGE_SECRET_NAMESPACE: "${pvc.namespace}",
    names.PARAM_NODE_PUBLISH_SECRET_NAME: "publish-${pvc.namespace}",
    names.PARAM_NODE_PUBLISH_SECRET_NAMESPACE: "kube-system",
    names.PARAM_CONTROLLER_EXPAND_SECRET_NAME: "expand",
    names.PARAM_CONTROLLER_EXPAND_SECRET_NAMESPACE: "${pvc.namespace}",
    names.PARAM_NODE_EXPAND_SECRET_NAME: "node-expand",
    names.PARAM_NODE_EXPAND_SECRET_NAMESPACE: "${pvc.namespace}",
}
TEAM = {"example.com/team": "blue"}


def make_secret(
    cluster: EmulatedCluster, name: str, data: Mapping[str, str], namespace: str = NAMESPACE
) -> None:
    encoded = {key: base64.b64encode(value.encode()).decode() for key, value in data.items()}
    body = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "data": encoded}
    cluster.create("secrets", {**body, "metadata": {"name": name, "namespace": namespace}})


@pytest.fixture
def driver_config(driver_config: DriverConfig) -> DriverConfig:
    """A driver that refuses CreateVolume and DeleteVolume without exactly these secrets."""
    policy = SecretsPolicy(
        required_for=frozenset({"CreateVolume", "DeleteVolume"}), expected=CREDENTIALS
    )
    return dataclasses.replace(driver_config, secrets=policy)


async def test_templated_secrets_reach_the_driver_and_the_pv(
    cluster: EmulatedCluster,
    operator: OperatorThread,
    created: list[VolumeRequest],
    secrets_seen: list[tuple[str, dict[str, str]]],
) -> None:
    make_secret(cluster, "data-prov", CREDENTIALS)
    await make_storage_class(cluster, operator, parameters={**TEMPLATED, "tier": "gold"})
    claim = make_claim(cluster, annotations=TEAM)
    pv = await wait_for_bound(cluster, claim)

    assert [s for m, s in secrets_seen if m == "CreateVolume"] == [CREDENTIALS]
    (request,) = created
    assert dict(request.parameters) == {"tier": "gold"}  # every secret key is stripped
    csi = pv["spec"]["csi"]
    assert csi["controllerPublishSecretRef"] == {"name": volume_name(claim), "namespace": "default"}
    assert csi["nodeStageSecretRef"] == {"name": "blue-stage", "namespace": "default"}
    assert csi["nodePublishSecretRef"] == {"name": "publish-default", "namespace": "kube-system"}
    assert csi["controllerExpandSecretRef"] == {"name": "expand", "namespace": "default"}
    assert csi["nodeExpandSecretRef"] == {"name": "node-expand", "namespace": "default"}
    annotations = pv["metadata"]["annotations"]
    assert annotations[names.ANN_DELETION_SECRET_NAME] == "data-prov"
    assert annotations[names.ANN_DELETION_SECRET_NAMESPACE] == "default"


async def test_deletion_uses_the_secret_named_on_the_pv(
    cluster: EmulatedCluster,
    operator: OperatorThread,
    driver: Driver,
    secrets_seen: list[tuple[str, dict[str, str]]],
) -> None:
    make_secret(cluster, "data-prov", CREDENTIALS)
    await make_storage_class(cluster, operator, parameters=TEMPLATED)
    claim = make_claim(cluster, annotations=TEAM)
    pv = await wait_for_bound(cluster, claim)

    cluster.delete("persistentvolumeclaims", NAMESPACE, "data")
    await wait_for_gone(cluster, "persistentvolumes", pv["metadata"]["name"])

    assert [s for m, s in secrets_seen if m == "DeleteVolume"] == [CREDENTIALS]
    assert not driver.state.volumes
    assert not events_for(cluster, pv, names.REASON_VOLUME_FAILED_DELETE)


async def test_default_secret_keys_serve_every_call(
    cluster: EmulatedCluster,
    operator: OperatorThread,
    secrets_seen: list[tuple[str, dict[str, str]]],
) -> None:
    make_secret(cluster, "shared", CREDENTIALS)
    parameters = {names.PARAM_SECRET_NAME: "shared", names.PARAM_SECRET_NAMESPACE: "default"}
    await make_storage_class(cluster, operator, parameters=parameters)
    claim = make_claim(cluster)
    pv = await wait_for_bound(cluster, claim)

    assert [s for m, s in secrets_seen if m == "CreateVolume"] == [CREDENTIALS]
    ref = {"name": "shared", "namespace": "default"}
    for field in ("controllerPublishSecretRef", "nodeStageSecretRef", "nodePublishSecretRef",
                  "controllerExpandSecretRef", "nodeExpandSecretRef"):  # fmt: skip
        assert pv["spec"]["csi"][field] == ref
    assert pv["metadata"]["annotations"][names.ANN_DELETION_SECRET_NAME] == "shared"


async def test_missing_provisioner_secret_waits_for_it_with_the_go_message(
    cluster: EmulatedCluster, operator: OperatorThread, calls: Calls
) -> None:
    await make_storage_class(cluster, operator, parameters=TEMPLATED)
    claim = make_claim(cluster, annotations=TEAM)
    await wait_for_event(
        cluster,
        claim,
        names.REASON_PROVISIONING_FAILED,
        message="error getting secret data-prov in namespace default:"
        ' secrets "data-prov" not found',
    )
    assert calls.count("CreateVolume") == 0

    make_secret(cluster, "data-prov", CREDENTIALS)
    await wait_for_bound(cluster, claim)


class TestWithoutSecretsRequired:
    @pytest.fixture
    def driver_config(self, driver_config: DriverConfig) -> DriverConfig:
        return dataclasses.replace(driver_config, secrets=SecretsPolicy())

    async def test_no_secret_parameters_mean_empty_deletion_annotations_and_no_secrets(
        self,
        cluster: EmulatedCluster,
        operator: OperatorThread,
        driver: Driver,
        secrets_seen: list[tuple[str, dict[str, str]]],
    ) -> None:
        await make_storage_class(cluster, operator)
        claim = make_claim(cluster)
        pv = await wait_for_bound(cluster, claim)
        annotations = pv["metadata"]["annotations"]
        assert annotations[names.ANN_DELETION_SECRET_NAME] == ""
        assert annotations[names.ANN_DELETION_SECRET_NAMESPACE] == ""
        assert not [k for k in pv["spec"]["csi"] if k.endswith("SecretRef")]

        cluster.delete("persistentvolumeclaims", NAMESPACE, "data")
        await wait_until(lambda: not driver.state.volumes, what="the volume deleted")
        assert [s for _, s in secrets_seen] == [{}, {}]  # CreateVolume, DeleteVolume


BAD_SECRET_PARAMETERS = [
    pytest.param(
        {**TEMPLATED, names.PARAM_PROVISIONER_SECRET_NAME: "${pvc.foo}"},
        'error resolving value "${pvc.foo}": invalid tokens: ["pvc.foo"]',
        id="unknown-token",
    ),
    pytest.param(
        {**TEMPLATED, names.PARAM_PROVISIONER_SECRET_NAMESPACE: "${pvc.name}"},
        'error resolving value "${pvc.name}": invalid tokens: ["pvc.name"]',
        id="claim-name-in-namespace",
    ),
    pytest.param(
        {**TEMPLATED, names.PARAM_NODE_STAGE_SECRET_NAME: "${pvc.annotations['x.io/missing']}"},
        "error resolving value \"${pvc.annotations['x.io/missing']}\":"
        " invalid tokens: [\"pvc.annotations['x.io/missing']\"]",
        id="missing-annotation",
    ),
    pytest.param(
        {
            **TEMPLATED,
            names.PARAM_NODE_STAGE_SECRET_NAME: "${pvc.annotations['example.com/team']}_X",
        },
        '"${pvc.annotations[\'example.com/team\']}_X" resolved to "blue_X"'
        " which is not a valid secret name",
        id="invalid-resolved-name",
    ),
    pytest.param(
        {names.PARAM_PROVISIONER_SECRET_NAME: "prov"},
        "failed to get name and namespace template from params: either name and namespace for"
        " Provisioner secrets specified, Both must be specified",
        id="name-without-namespace",
    ),
    pytest.param(
        {
            names.PARAM_NODE_PUBLISH_SECRET_NAME: "a",
            names.PARAM_NODE_PUBLISH_SECRET_NAMESPACE: "default",
            names.PARAM_DEPRECATED_NODE_PUBLISH_SECRET_NAME: "b",
            names.PARAM_DEPRECATED_NODE_PUBLISH_SECRET_NAMESPACE: "default",
        },
        "failed to get name and namespace template from params: NodePublish secrets specified"
        ' in parameters with both "csi" and "csi.storage.k8s.io/" keys',
        id="both-key-styles",
    ),
]


@pytest.mark.parametrize(("parameters", "message"), BAD_SECRET_PARAMETERS)
async def test_bad_secret_parameters_fail_clearly_and_create_nothing(
    cluster: EmulatedCluster,
    operator: OperatorThread,
    calls: Calls,
    driver: Driver,
    parameters: dict[str, str],
    message: str,
) -> None:
    make_secret(cluster, "data-prov", CREDENTIALS)
    await make_storage_class(cluster, operator, parameters=parameters)
    claim = make_claim(cluster, annotations=TEAM)
    await wait_for_event(cluster, claim, names.REASON_PROVISIONING_FAILED, message=message)

    # Retried (the same event counted again), and still nothing was created.
    await wait_until(
        lambda: events_for(cluster, claim, names.REASON_PROVISIONING_FAILED)[0]["count"] >= 2,
        what="a retry",
    )
    current = cluster.get("persistentvolumeclaims", NAMESPACE, "data")
    assert current is not None
    assert current["status"]["phase"] == "Pending"
    assert calls.count("CreateVolume") == 0
    assert not driver.state.volumes
    assert not cluster.objects("persistentvolumes")


async def test_claim_with_a_bad_template_is_provisioned_once_the_class_is_fixed(
    cluster: EmulatedCluster, operator: OperatorThread
) -> None:
    make_secret(cluster, "data-prov", CREDENTIALS)
    broken = {**TEMPLATED, names.PARAM_PROVISIONER_SECRET_NAME: "${pvc.foo}"}
    await make_storage_class(cluster, operator, parameters=broken)
    claim = make_claim(cluster, annotations=TEAM)
    await wait_for_event(cluster, claim, names.REASON_PROVISIONING_FAILED)

    cluster.delete("storageclasses", None, "sc")  # classes are immutable: replace it
    await make_storage_class(cluster, operator, parameters=TEMPLATED)
    pv = await wait_for_bound(cluster, claim)
    assert pv["metadata"]["annotations"][names.ANN_DELETION_SECRET_NAME] == "data-prov"
