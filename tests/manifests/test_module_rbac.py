"""Modules' RBAC: declared next to their code, printed by `kopf-csi rbac -m`, shipped generated.

- `manifests/modules/<name>/rbac.yaml` is exactly what `kopf-csi rbac -m` prints for each
  example module that declares rules (regenerate with the command in its kustomization.yaml);
- the printed YAML is the ClusterRole and Role objects `rbac.manifests` builds, each bound to
  the operator's ServiceAccount (`--namespace`, `--service-account` for others);
- a module without declarations prints a comment saying so; a module that is not there is a
  usage error, with a hint for a file path without its `.py`.
"""

from __future__ import annotations

import pathlib

import pytest
import yaml

from kopf_csi import cli, modules, rbac

ROOT = pathlib.Path(__file__).resolve().parents[2]
GENERATED = {
    "kopf_csi_handlers.examples.namespace_quota": "manifests/modules/namespace-quota/rbac.yaml",
}


def printed(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["rbac", *args], env={})
    out, err = capsys.readouterr()
    return int(exit_info.value.code or 0), out, err


@pytest.mark.parametrize(("module", "path"), sorted(GENERATED.items()))
def test_the_shipped_module_rbac_is_generated_from_the_declarations(
    capsys: pytest.CaptureFixture[str], module: str, path: str
) -> None:
    code, out, _ = printed(capsys, "-m", module)
    assert code == 0
    assert (ROOT / path).read_text() == out, f"regenerate: kopf-csi rbac -m {module} > {path}"


def test_every_example_that_declares_rbac_ships_it() -> None:
    examples = [
        f"kopf_csi_handlers.examples.{p.stem}"
        for p in (ROOT / "handlers/examples").glob("[!_]*.py")
    ]
    declaring = {module for module in examples if modules.declared_rbac([module])}
    assert declaring == set(GENERATED)


def test_the_yaml_is_the_roles_and_their_bindings(capsys: pytest.CaptureFixture[str]) -> None:
    module = "kopf_csi_handlers.examples.namespace_quota"
    code, out, _ = printed(
        capsys, "-m", module, "--namespace", "storage", "--service-account", "op"
    )
    assert code == 0
    objects = list(yaml.safe_load_all(out))
    declared = modules.declared_rbac([module])
    assert objects == rbac.manifests(declared, namespace="storage", account="op")
    assert [obj["kind"] for obj in objects] == ["ClusterRole", "ClusterRoleBinding"]
    assert objects[1]["subjects"] == [
        {"kind": "ServiceAccount", "name": "op", "namespace": "storage"}
    ]
    assert objects[0]["rules"] == [
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]}
    ]


def test_a_namespaced_rule_makes_a_role_in_the_operators_namespace() -> None:
    rules = (
        rbac.namespaced("configmaps", "get", why="settings"),
        rbac.cluster("volumesnapshots.snapshot.storage.k8s.io", "patch"),
    )
    objects = rbac.manifests({"myproject/budget.py": rules})
    assert [(o["kind"], o["metadata"]) for o in objects] == [
        ("ClusterRole", {"name": "kopf-csi-budget"}),
        ("ClusterRoleBinding", {"name": "kopf-csi-budget"}),
        ("Role", {"name": "kopf-csi-budget", "namespace": "kopf-csi"}),
        ("RoleBinding", {"name": "kopf-csi-budget", "namespace": "kopf-csi"}),
    ]
    assert objects[0]["rules"] == [
        {
            "apiGroups": ["snapshot.storage.k8s.io"],
            "resources": ["volumesnapshots"],
            "verbs": ["patch"],
        }
    ]
    assert list(yaml.safe_load_all(rbac.to_yaml({"myproject/budget.py": rules}))) == objects


def test_a_module_without_declarations_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = printed(capsys, "-m", "kopf_csi_handlers.examples.claim_labels")
    assert (code, out) == (
        0,
        "# kopf_csi_handlers.examples.claim_labels: no RBAC declared (api.rbac.declare)\n",
    )


def test_a_file_without_its_py_gets_a_hint(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    code, _, err = printed(capsys, "-m", "handlers/examples/claim_labels")
    assert code == 2
    assert err == (
        "kopf-csi rbac: error: no such handler file: 'handlers/examples/claim_labels'"
        " (did you mean 'handlers/examples/claim_labels.py'?)\n"
    )
