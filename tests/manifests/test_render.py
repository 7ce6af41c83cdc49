"""The kustomizations render, and what they render is a deployment that can work.

- `kubectl kustomize` renders manifests/, crds/, examples/, kind/ and monitoring/ (skipped
  without kubectl), and the plain reading the RBAC tests fall back on matches it;
- every object has apiVersion, kind and metadata.name, of a kind we expect, namespaced kinds
  in a namespace, base objects labelled as part of kopf-csi;
- the Deployment: images set, the operator's args are flags `kopf-csi run` accepts and mean
  what the manifests intend, the driver's args are flags the reference driver accepts, the
  socket is shared through an emptyDir, POD_NAMESPACE/NODE_NAME come from the downward API,
  probes hit the health endpoint's paths and port, non-root with a read-only root file system
  and every mounted path a volume;
- the CSIDriver, StorageClasses (Immediate and WaitForFirstConsumer) and VolumeSnapshotClass
  name the driver the reference driver reports; the examples refer to objects that exist;
- the kind overlay: the socket becomes the kubelet's plugin path, registered by the
  node-driver-registrar; only the driver container gains privileges.
"""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

from kopf_csi import cli, names
from kopf_csi.driver import __main__ as driver_cli
from kopf_csi.driver.config import DEFAULT_NAME
from kopf_csi.endpoints import parse_endpoint

from .rendering import MANIFESTS, Body, find, kubectl, kustomize, read_resources, render

NAMESPACE = "kopf-csi"
API_VERSIONS = {
    "Namespace": "v1",
    "ServiceAccount": "v1",
    "PersistentVolumeClaim": "v1",
    "Pod": "v1",
    "ClusterRole": "rbac.authorization.k8s.io/v1",
    "ClusterRoleBinding": "rbac.authorization.k8s.io/v1",
    "Role": "rbac.authorization.k8s.io/v1",
    "RoleBinding": "rbac.authorization.k8s.io/v1",
    "Deployment": "apps/v1",
    "CSIDriver": "storage.k8s.io/v1",
    "StorageClass": "storage.k8s.io/v1",
    "CustomResourceDefinition": "apiextensions.k8s.io/v1",
    "VolumeSnapshotClass": "snapshot.storage.k8s.io/v1",
    "VolumeSnapshot": "snapshot.storage.k8s.io/v1",
    "Service": "v1",
    "ConfigMap": "v1",
    "ServiceMonitor": "monitoring.coreos.com/v1",
    "PrometheusRule": "monitoring.coreos.com/v1",
}
NAMESPACED = {"ServiceAccount", "Role", "RoleBinding", "Deployment", "PersistentVolumeClaim",
              "Pod", "VolumeSnapshot", "Service", "ConfigMap", "ServiceMonitor",
              "PrometheusRule"}  # fmt: skip
DIRECTORIES = ("", "crds", "examples", "kind", "monitoring")

needs_kubectl = pytest.mark.skipif(kubectl() is None, reason="kubectl is not installed")


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[Body]]:
    return {name: render(MANIFESTS / name) for name in DIRECTORIES}


def _deployment(objects: list[Body]) -> Body:
    (deployment,) = find(objects, "Deployment", "kopf-csi")
    return deployment


def _container(deployment: Body, name: str) -> Body:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    (container,) = [c for c in containers if c["name"] == name]
    return dict(container)


def _volume(deployment: Body, name: str) -> Body:
    volumes = deployment["spec"]["template"]["spec"]["volumes"]
    (volume,) = [v for v in volumes if v["name"] == name]
    return dict(volume)


def _mount(container: Body, path: str) -> Body:
    """The volume mount that holds `path` (the longest matching mountPath)."""
    mounts = [
        m
        for m in container.get("volumeMounts", [])
        if pathlib.PurePosixPath(path).is_relative_to(m["mountPath"])
    ]
    assert mounts, f"{container['name']}: nothing mounted at {path}"
    return dict(max(mounts, key=lambda m: len(m["mountPath"])))


def _flag(args: list[str], name: str) -> str:
    (value,) = [arg.partition("=")[2] for arg in args if arg.partition("=")[0] == name]
    return value


@needs_kubectl
# Explicit ids: tests/conftest.py skips items whose keywords include "kind", and a bare
# parameter id "kind" would be one.
@pytest.mark.parametrize("directory", DIRECTORIES, ids=lambda d: f"manifests/{d}".rstrip("/"))
def test_kubectl_renders(directory: str) -> None:
    assert kustomize(MANIFESTS / directory)


@needs_kubectl
@pytest.mark.parametrize("directory", ["", "crds", "examples"])
def test_plain_reading_matches_kubectl(directory: str) -> None:
    def key(obj: Body) -> tuple[str, str, str]:
        return (obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"])

    plain = {key(obj): obj for obj in read_resources(MANIFESTS / directory)}
    real = {key(obj): obj for obj in kustomize(MANIFESTS / directory)}
    assert plain.keys() == real.keys()
    for name, obj in real.items():
        if obj["kind"] in ("ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding"):
            assert obj.get("rules") == plain[name].get("rules")
            assert obj.get("subjects") == plain[name].get("subjects")


def test_objects_are_complete_and_known(rendered: dict[str, list[Body]]) -> None:
    for directory, objects in rendered.items():
        assert objects, directory
        for obj in objects:
            kind, meta = obj.get("kind"), obj.get("metadata") or {}
            where = f"{directory or 'manifests'}: {kind} {meta.get('name')}"
            assert kind in API_VERSIONS, f"{where}: unexpected kind"
            assert obj.get("apiVersion") == API_VERSIONS[kind], where
            assert meta.get("name"), where
            assert bool(meta.get("namespace")) == (kind in NAMESPACED), where


def test_base_objects_are_labelled_and_namespaced(rendered: dict[str, list[Body]]) -> None:
    for obj in rendered[""]:
        meta = obj["metadata"]
        assert meta.get("labels", {}).get("app.kubernetes.io/part-of") == "kopf-csi", meta
        if obj["kind"] in NAMESPACED:
            assert meta["namespace"] == NAMESPACE, meta
    kinds = sorted(obj["kind"] for obj in rendered[""])
    assert kinds == sorted([
        "Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role",
        "RoleBinding", "Deployment", "CSIDriver", "StorageClass", "StorageClass",
        "VolumeSnapshotClass",
    ])  # fmt: skip
    # Applying the base creates no workloads: those are the examples'.
    assert not {"PersistentVolumeClaim", "Pod", "VolumeSnapshot"} & set(kinds)


def test_every_container_has_an_image(rendered: dict[str, list[Body]]) -> None:
    for directory, objects in rendered.items():
        for obj in objects:
            spec = obj.get("spec", {})
            pod = spec.get("template", {}).get("spec", spec) if obj["kind"] != "Pod" else spec
            for container in pod.get("containers", []) if isinstance(pod, dict) else []:
                assert container.get("image"), f"{directory}: {container['name']} has no image"
    base = _deployment(rendered[""])
    assert {_container(base, n)["image"] for n in ("kopf-csi", "driver")} == {"kopf-csi:0.1.0"}
    kind = _deployment(rendered["kind"])
    assert {_container(kind, n)["image"] for n in ("kopf-csi", "driver")} == {"kopf-csi:dev"}


def _operator_settings(deployment: Body) -> Any:
    """The operator container's args, parsed by `kopf-csi run`'s own parser."""
    container = _container(deployment, "kopf-csi")
    assert "command" not in container, "the image's entrypoint (`kopf-csi run`) runs it"
    env = {"POD_NAMESPACE": NAMESPACE, "NODE_NAME": "node-1"}
    return cli.settings_for(container["args"], env)


def test_operator_args_are_flags_kopf_csi_run_accepts(rendered: dict[str, list[Body]]) -> None:
    for directory in ("", "kind"):
        settings = _operator_settings(_deployment(rendered[directory]))
        assert settings.csi.address == "/csi/csi.sock"
        assert settings.leader_election.enabled
        assert settings.capacity.enabled
        assert parse_endpoint(settings.http.endpoint) == (None, 8080)


def test_a_wrong_flag_would_be_caught() -> None:
    with pytest.raises(cli.UsageError, match="csi-adress"):
        cli.settings_for(["--csi-adress=/csi/csi.sock"], {})


def test_driver_args_are_flags_the_driver_accepts(rendered: dict[str, list[Body]]) -> None:
    for directory in ("", "kind"):
        driver = _container(_deployment(rendered[directory]), "driver")
        assert driver["command"][-1] in ("kopf_csi.driver", "driver")  # python -m, or via sh
        args = [arg.replace("$(NODE_NAME)", "node-1") for arg in driver["args"]]
        config, socket, _ = driver_cli.parse_args(args)
        assert socket == pathlib.PurePosixPath("/csi/csi.sock")
        assert config.node_id == "node-1"
        assert config.name == DEFAULT_NAME
        assert config.features.attach
        assert config.known_nodes is None  # '*': any node


def test_the_socket_is_shared_through_an_emptydir(rendered: dict[str, list[Body]]) -> None:
    deployment = _deployment(rendered[""])
    operator, driver = _container(deployment, "kopf-csi"), _container(deployment, "driver")
    socket = _flag(operator["args"], "--csi-address")
    assert _flag(driver["args"], "--endpoint") == f"unix://{socket}"
    volume = _mount(operator, socket)["name"]
    assert _mount(driver, socket)["name"] == volume
    assert _volume(deployment, volume) == {"name": volume, "emptyDir": {}}


def test_downward_api_environment(rendered: dict[str, list[Body]]) -> None:
    deployment = _deployment(rendered[""])
    env = {e["name"]: e for e in _container(deployment, "kopf-csi")["env"]}
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    driver_env = {e["name"]: e for e in _container(deployment, "driver")["env"]}
    assert driver_env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"


def test_probes_use_the_health_endpoint(rendered: dict[str, list[Body]]) -> None:
    deployment = _deployment(rendered[""])
    operator = _container(deployment, "kopf-csi")
    _, port = parse_endpoint(_flag(operator["args"], "--http-endpoint"))
    ports = {p["name"]: p["containerPort"] for p in operator["ports"]}
    for probe, path in (("livenessProbe", names.PATH_HEALTHZ),
                        ("readinessProbe", names.PATH_READYZ)):  # fmt: skip
        get = operator[probe]["httpGet"]
        assert get["path"] == path
        assert ports[get["port"]] == port


def test_non_root_and_read_only(rendered: dict[str, list[Body]]) -> None:
    deployment = _deployment(rendered[""])
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert isinstance(pod["securityContext"]["runAsUser"], int)
    assert pod["securityContext"]["runAsUser"] > 0
    assert pod["serviceAccountName"] == "kopf-csi"
    for name in ("kopf-csi", "driver"):
        container = _container(deployment, name)
        context = container["securityContext"]
        assert context["readOnlyRootFilesystem"] is True, name
        assert context["allowPrivilegeEscalation"] is False, name
        assert context["capabilities"]["drop"] == ["ALL"], name
        mounted = {m["name"] for m in container["volumeMounts"]}
        assert mounted <= {v["name"] for v in pod["volumes"]}, name
        assert "/tmp" in {m["mountPath"] for m in container["volumeMounts"]}, name
    driver = _container(deployment, "driver")
    assert _mount(driver, _flag(driver["args"], "--data-dir"))["name"] == "data-dir"


def test_the_driver_name_is_the_same_everywhere(rendered: dict[str, list[Body]]) -> None:
    base = rendered[""]
    (driver,) = find(base, "CSIDriver")
    assert driver["metadata"]["name"] == DEFAULT_NAME
    assert driver["spec"]["attachRequired"] is True
    classes = find(base, "StorageClass")
    assert {c["provisioner"] for c in classes} == {DEFAULT_NAME}
    assert sorted(c["volumeBindingMode"] for c in classes) == ["Immediate", "WaitForFirstConsumer"]
    assert {c["driver"] for c in find(base, "VolumeSnapshotClass")} == {DEFAULT_NAME}


def test_examples_refer_to_existing_objects(rendered: dict[str, list[Body]]) -> None:
    examples, base = rendered["examples"], rendered[""]
    classes = {c["metadata"]["name"] for c in find(base, "StorageClass")}
    snapshot_classes = {c["metadata"]["name"] for c in find(base, "VolumeSnapshotClass")}
    claims = {c["metadata"]["name"]: c for c in find(examples, "PersistentVolumeClaim")}
    snapshots = {s["metadata"]["name"]: s for s in find(examples, "VolumeSnapshot")}
    for claim in claims.values():
        assert claim["spec"]["storageClassName"] in classes
        source = claim["spec"].get("dataSource")
        if source:
            assert source["kind"] == "VolumeSnapshot"
            assert source["name"] in snapshots
    for snapshot in snapshots.values():
        assert snapshot["spec"]["volumeSnapshotClassName"] in snapshot_classes
        assert snapshot["spec"]["source"]["persistentVolumeClaimName"] in claims
    for pod in find(examples, "Pod"):
        for volume in pod["spec"]["volumes"]:
            assert volume["persistentVolumeClaim"]["claimName"] in claims


def test_the_sandbox_examples_are_the_base_objects() -> None:
    """The sandbox reads examples/csidriver.yaml, storageclasses.yaml and
    volumesnapshotclass.yaml: links to the base."""
    for name in ("csidriver.yaml", "storageclasses.yaml", "volumesnapshotclass.yaml"):
        link = MANIFESTS / "examples" / name
        assert link.resolve() == (MANIFESTS / "base" / name).resolve()


def test_kind_overlay_adds_the_node_side(rendered: dict[str, list[Body]]) -> None:
    objects = rendered["kind"]
    (namespace,) = find(objects, "Namespace")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    deployment = _deployment(objects)
    registrar = _container(deployment, "node-driver-registrar")
    path = _flag(registrar["args"], "--kubelet-registration-path")
    assert _flag(registrar["args"], "--csi-address") == "/csi/csi.sock"
    socket = _volume(deployment, "socket-dir")
    assert "emptyDir" not in socket
    assert path == f"{socket['hostPath']['path']}/csi.sock"
    assert path.startswith(f"/var/lib/kubelet/plugins/{DEFAULT_NAME}/")
    # The driver's data is at the same path on the node, so its publish symlinks resolve.
    driver = _container(deployment, "driver")
    data = _flag(driver["args"], "--data-dir")
    assert _volume(deployment, "data-dir")["hostPath"]["path"] == data
    assert driver["securityContext"]["privileged"] is True
    # The kubelet's directories at the same paths: publish targets and staging directories.
    for path in ("/var/lib/kubelet/pods/uid/volumes", "/var/lib/kubelet/plugins/kubernetes.io"):
        mount = _mount(driver, path)
        host = _volume(deployment, mount["name"])["hostPath"]["path"]
        assert host == mount["mountPath"], path
        assert mount["mountPropagation"] == "Bidirectional"
    operator = _container(deployment, "kopf-csi")
    assert operator["securityContext"]["allowPrivilegeEscalation"] is False
    assert "runAsUser" not in operator["securityContext"]  # the pod's non-root uid
    assert deployment["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == 10001
