"""What each shape becomes: the kopf-csi container, and everything else as it was.

We test these aspects:
- the cloud block driver: every role's effective setting (resolved by `kopf-csi run`'s own
  parser) is what its Go sidecar ran with, per-sidecar `--timeout` included, and a role that
  set none keeps its Go default although the provisioner's `--timeout` is kopf-csi's shared
  fallback; `--feature-gates`, `--extra-create-metadata`, `--default-fstype`, leader election,
  the API rate; one endpoint (the provisioner's port and probe), the others named in a note;
  resources summed (no limit where a sidecar had none), the measured ratio noted, or applied
  on request;
- `$(ADDRESS)` resolved; a `$(VAR)` from `valueFrom` kept with its variable;
- the file driver (provisioner and resizer only): the other roles switched off;
- the Rook-style pod: one kopf-csi container per driver socket, each with its own sidecars'
  flags and its socket's mount;
- hostpath: no leader election, no ports, no resources: none invented;
- the driver, livenessprobe, node-driver-registrar and every other container are unchanged.
"""

from __future__ import annotations

import pytest

from kopf_csi import cli
from kopf_csi.migration import rendering, stream, transform

from .conftest import SHAPES, containers, migrated, text_of, workload

SIDECAR_IMAGES = ("csi-provisioner", "csi-attacher", "csi-resizer", "csi-snapshotter",
                  "csi-external-health-monitor-controller")  # fmt: skip


def _kopf_csi(shape: str, name: str = "kopf-csi", **options: object) -> dict:
    return containers(workload(migrated(shape, **options).text))[name]


def test_the_cloud_drivers_roles_keep_their_go_values() -> None:
    settings = cli.settings_for(_kopf_csi("cloud-block")["args"], {})
    assert settings.csi.address == "/var/lib/csi/sockets/pluginproxy/csi.sock"
    assert settings.csi.timeout == 60  # the provisioner's
    assert settings.attacher.timeout == 360
    assert settings.resizer.timeout == 60
    assert settings.snapshotter.timeout == 60  # set by none: csi-snapshotter's own 1m
    assert settings.health.timeout == 15  # set by none: the health monitor's own 15s
    assert settings.provisioner.extra_create_metadata is True
    assert settings.snapshotter.extra_create_metadata is True
    assert settings.provisioner.default_fstype == "ext4"
    assert settings.attacher.default_fstype == ""  # the attacher had none
    assert settings.provisioner.retry_interval_max == 1800
    assert settings.attacher.retry_interval_max == 300
    assert settings.resizer.retry_interval_max == 1800
    assert settings.snapshotter.retry_interval_max == 300
    assert (settings.workers.provisioner, settings.workers.attacher) == (100, 100)
    assert (settings.resizer.workers, settings.snapshotter.workers) == (100, 100)
    assert settings.resizer.handle_volume_inuse_error is False
    assert settings.health.monitor_interval == 300
    assert (settings.kube.qps, settings.kube.burst) == (20, 100)
    assert settings.leader_election.enabled is True
    assert settings.http.endpoint == "0.0.0.0:3302"
    assert (settings.health.enabled, settings.resizer.enabled, settings.snapshotter.enabled) == (
        True,
        True,
        True,
    )


def test_the_cloud_driver_keeps_one_endpoint_its_port_and_probe() -> None:
    result = migrated("cloud-block")
    container = containers(workload(result.text))["kopf-csi"]
    original = containers(workload(text_of("cloud-block")))["csi-provisioner"]
    assert container["ports"] == original["ports"]
    assert container["livenessProbe"] == original["livenessProbe"]
    [note] = [note for note in result.notes if "not served any more" in note]
    for lost in ("csi-attacher (0.0.0.0:3303)", "csi-resizer (0.0.0.0:3305)",
                 "csi-snapshotter (0.0.0.0:3304)", "csi-health-monitor (:3306)"):  # fmt: skip
        assert lost in note


def test_resources_are_summed_and_the_ratio_noted() -> None:
    result = migrated("cloud-block")
    deployment = workload(result.text)
    resources = containers(deployment)["kopf-csi"]["resources"]
    assert resources == {
        "requests": {"cpu": "50m", "memory": "180Mi"},  # 4 x 40Mi + 20Mi
        "limits": {"memory": "1152Mi"},  # 4 x 256Mi + 128Mi
    }
    assert "0.33x" in deployment["metadata"]["annotations"][rendering.RESOURCES]
    scaled = _kopf_csi("cloud-block", ratio=True)["resources"]
    assert scaled == {"requests": {"cpu": "45m", "memory": "60Mi"},
                      "limits": {"memory": "381Mi"}}  # fmt: skip


def test_a_limit_only_some_sidecars_have_is_dropped_with_a_note() -> None:
    text = text_of("cloud-block").replace(
        "          resources:\n            limits:\n              memory: 128Mi\n"
        "            requests:\n",
        "          resources:\n            requests:\n",
    )
    result = migrated_text(text)
    assert "limits" not in containers(workload(result.text))["kopf-csi"]["resources"]
    assert any("no memory limit" in note for note in result.notes)


def migrated_text(text: str) -> transform.Result:
    result = transform.migrate(text)
    assert not result.refusals
    return result


def test_a_reference_from_elsewhere_is_kept_with_its_variable() -> None:
    deployment = workload(text_of("file-driver"))
    pod = containers(deployment)
    for name in ("csi-provisioner", "csi-resizer"):
        pod[name]["args"].append("--leader-election-namespace=$(LEASES)")
        pod[name]["env"].append(
            {"name": "LEASES", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}
        )
    container = containers(workload(migrated_text(stream.dump(deployment)).text))["kopf-csi"]
    assert "--leader-election-namespace=$(LEASES)" in container["args"]
    assert {"name": "LEASES", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}} in (
        container["env"]
    )
    assert "--csi-address=/var/lib/csi/sockets/pluginproxy/csi.sock" in container["args"]
    assert [e["name"] for e in container["env"]] == ["POD_NAMESPACE", "LEASES"]


def test_the_file_driver_switches_the_absent_roles_off() -> None:
    args = _kopf_csi("file-driver")["args"]
    assert "--no-default-modules" in args
    modules = [arg.removeprefix("--module=") for arg in args if arg.startswith("--module=")]
    assert modules == [
        "kopf_csi_handlers.observability", "kopf_csi_handlers.lifecycle",
        "kopf_csi_handlers.caches", "kopf_csi_handlers.provisioner",
        "kopf_csi_handlers.capacity", "kopf_csi_handlers.resizer",
    ]  # fmt: skip
    settings = cli.settings_for(args, {})
    assert (settings.csi.timeout, settings.resizer.timeout) == (300, 120)
    assert settings.provisioner.retry_interval_start == 5
    assert settings.resizer.retry_interval_start == 1  # not the provisioner's 5s
    assert settings.leader_election.enabled


def test_the_rook_pod_gets_one_kopf_csi_per_driver_socket() -> None:
    result = migrated("rook-ceph")
    pod = containers(workload(result.text))
    rbd, cephfs = pod["kopf-csi-1"], pod["kopf-csi-2"]
    assert [r for r in result.rewrites[0].replaced] == [
        ["csi-rbd-provisioner", "csi-rbd-attacher", "csi-rbd-resizer", "csi-rbd-snapshotter"],
        ["csi-cephfs-provisioner", "csi-cephfs-resizer", "csi-cephfs-snapshotter"],
    ]
    assert rbd["volumeMounts"] == [{"name": "socket-dir", "mountPath": "/csi"}]
    assert cephfs["volumeMounts"] == [{"name": "cephfs-socket-dir", "mountPath": "/csi-cephfs"}]
    for container, address in ((rbd, "/csi/csi-provisioner.sock"),
                               (cephfs, "/csi-cephfs/csi-provisioner.sock")):  # fmt: skip
        settings = cli.settings_for(container["args"], {})
        assert settings.csi.address == address
        assert settings.leader_election.namespace == "rook-ceph"
        assert settings.leader_election.lease_duration == 137
        assert settings.provisioner.retry_interval_start == 0.5
        assert settings.snapshotter.retry_interval_start == 1
    assert cli.settings_for(rbd["args"], {}).attacher.default_fstype == "ext4"
    assert "--module=kopf_csi_handlers.attacher" not in rbd["args"]
    assert "--no-default-modules" in cephfs["args"]
    assert "--module=kopf_csi_handlers.attacher" not in cephfs["args"]
    assert list(pod) == ["kopf-csi-1", "csi-rbdplugin", "kopf-csi-2", "csi-cephfsplugin",
                         "liveness-prometheus"]  # fmt: skip


def test_hostpath_gets_no_leader_election_ports_or_resources() -> None:
    container = _kopf_csi("hostpath")
    assert container["args"] == ["--csi-address=/csi/csi.sock", "--v=5"]
    assert "ports" not in container
    assert "resources" not in container
    assert "livenessProbe" not in container


@pytest.mark.parametrize("shape", SHAPES)
def test_every_other_container_is_unchanged(shape: str) -> None:
    before = containers(workload(text_of(shape)))
    after = containers(workload(migrated(shape).text))
    kept = {
        name: container for name, container in before.items()
        if not any(f"/{image}:" in container["image"] for image in SIDECAR_IMAGES)
    }  # fmt: skip
    assert kept
    assert {name: after[name] for name in kept} == kept
    assert not set(before) - set(kept) & set(after)
