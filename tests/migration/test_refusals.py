"""What `kopf-csi migrate` refuses, each refusal naming its workload, container and flag.

We test these aspects, each on a real shape with one change:
- a flag kopf-csi does not support, and a Go knob kopf-csi has only at one value;
- a feature gate kopf-csi does not know, or knows only at the other value;
- different values of a shared flag (`--kube-api-qps`, `--leader-election-namespace`, the
  lease duration), a value left out counting as its Go default;
- leader election on one sidecar and off on another (upstream hostpath's health monitor);
- a sidecar image whose major version is newer than the behaviour we match, or a tag that
  names no version;
- a value kopf-csi's own parser refuses;
- a refused migration writes nothing, exits 1, and `--check` reports the same; while
  different per-sidecar `--timeout`s are no refusal (kopf-csi has them per role).
"""

from __future__ import annotations

import pytest

from kopf_csi.migration import stream, transform

from .conftest import containers, run, text_of, workload


def _changed(shape: str, container: str, *, add: tuple[str, ...] = (),
             drop: tuple[str, ...] = (), image: str | None = None) -> str:  # fmt: skip
    """The shape's workload alone, with one container's args or image changed."""
    obj = workload(text_of(shape))
    found = containers(obj)[container]
    found["args"] = [arg for arg in found.get("args", []) if arg not in drop] + list(add)
    if image is not None:
        found["image"] = image
    return stream.dump(obj)


REGISTRY = "registry.k8s.io/sig-storage"
CASES = [
    pytest.param(
        "cloud-block", "csi-attacher", ("--leader-election-type=leases",), (), None,
        "csi-attacher", "--leader-election-type", "does not support",
        id="unsupported-flag",
    ),
    pytest.param(
        "cloud-block", "csi-provisioner", ("--capacity-ownerref-level=1",), (), None,
        "csi-provisioner", "--capacity-ownerref-level=1", "always behaves as",
        id="go-knob-at-another-value",
    ),
    pytest.param(
        "hostpath", "csi-provisioner", ("--feature-gates=Topology=false",), (), None,
        "csi-provisioner", "--feature-gates=Topology=false (Topology)", "Topology=true",
        id="feature-gate-off",
    ),
    pytest.param(
        "cloud-block", "csi-resizer", ("--feature-gates=VolumeAttributesClass=true,Foo=true",),
        (), None, "csi-resizer", "(Foo)", "does not know the resizer feature gate Foo",
        id="unknown-feature-gate",
    ),
    pytest.param(
        "cloud-block", "csi-snapshotter", ("--kube-api-qps=50",), ("--kube-api-qps=20",), None,
        "csi-snapshotter", "--kube-api-qps", "--kube-api-qps=20 in \"csi-provisioner\"",
        id="different-kube-api-qps",
    ),
    pytest.param(
        "cloud-block", "csi-health-monitor", (), ("--kube-api-burst=100",), None,
        "csi-health-monitor", "--kube-api-burst", "--kube-api-burst left out (Go: 10)",
        id="shared-flag-left-out-on-one",
    ),
    pytest.param(
        "rook-ceph", "csi-rbd-snapshotter", ("--leader-election-namespace=kube-system",),
        ("--leader-election-namespace=rook-ceph",), None, "csi-rbd-snapshotter",
        "--leader-election-namespace", "one --leader-election-namespace for every role",
        id="different-leader-election-namespace",
    ),
    pytest.param(
        "rook-ceph", "csi-cephfs-resizer", ("--leader-election-lease-duration=140s",),
        ("--leader-election-lease-duration=137s",), None, "csi-cephfs-resizer",
        "--leader-election-lease-duration", "137s",
        id="different-lease-duration",
    ),
    pytest.param(
        "hostpath", "csi-external-health-monitor-controller", ("--leader-election",), (), None,
        "csi-external-health-monitor-controller", "--leader-election",
        "leader election is on in csi-external-health-monitor-controller and off in"
        " csi-provisioner, csi-attacher, csi-resizer, csi-snapshotter",
        id="leader-election-on-one-off-others",
    ),
    pytest.param(
        "file-driver", "csi-provisioner", (), (), f"{REGISTRY}/csi-provisioner:v7.0.0",
        "csi-provisioner", "image registry.k8s.io/sig-storage/csi-provisioner:v7.0.0",
        "v7 is newer than the csi-provisioner v6 whose behaviour kopf-csi matches",
        id="newer-major-image",
    ),
    pytest.param(
        "cloud-block", "csi-snapshotter", (), (), f"{REGISTRY}/csi-snapshotter:latest",
        "csi-snapshotter", "image registry.k8s.io/sig-storage/csi-snapshotter:latest",
        "its tag names no version", id="unversioned-image",
    ),
    pytest.param(
        "file-driver", "csi-resizer", ("--timeout=soon",), ("--timeout=120s",), None,
        "csi-resizer", "--timeout=soon", "is not a duration", id="bad-value",
    ),
]  # fmt: skip


@pytest.mark.parametrize(
    ("shape", "container", "add", "drop", "image", "named", "flag", "reason"), CASES
)
def test_a_refusal_names_its_container_and_flag(
    shape: str, container: str, add: tuple[str, ...], drop: tuple[str, ...], image: str | None,
    named: str, flag: str, reason: str,
) -> None:  # fmt: skip
    text = _changed(shape, container, add=add, drop=drop, image=image)
    result = transform.migrate(text)
    assert result.text == ""
    messages = [str(refusal) for refusal in result.refusals]
    assert len(messages) == 1, messages
    [message] = messages
    assert f'container "{named}": ' in message
    assert flag in message
    assert reason in message
    kind = workload(text)["kind"].lower()
    assert message.startswith(f"{kind} {workload(text)['metadata']['namespace']}/")

    code, out, err = run([], stdin=text)
    assert (code, out) == (1, "")
    assert f"refused: {message}" in err
    code, out, _ = run(["--check"], stdin=text)
    assert code == 1
    assert f"refused: {message}" in out


def test_per_sidecar_timeouts_are_no_refusal() -> None:
    text = _changed("cloud-block", "csi-snapshotter", add=("--timeout=10m",))
    result = transform.migrate(text)
    assert not result.refusals
    assert "--snapshotter-timeout=10m" in containers(workload(result.text))["kopf-csi"]["args"]


def test_check_reports_without_writing_a_stream() -> None:
    code, out, err = run(["--check"], stdin=text_of("cloud-block"))
    assert code == 0
    assert err == ""
    assert out.startswith("would change:\ndeployment kube-system/blockstore-csi-controller:")
    assert "added: clusterrole kopf-csi-kube-system-blockstore-csi-controller-sa" in out
    assert "kind:" not in out
