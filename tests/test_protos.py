"""The committed stubs are what `protos/` generates, and the proto is the whole CSI v1.12.0.

We test these aspects:
- regenerating from `protos/` gives byte-identical files (the stubs cannot drift);
- every service and RPC of the spec is present, with the spec's streaming;
- every secret-bearing field is named `secrets`, so redaction by name covers them all.
"""

from __future__ import annotations

import filecmp
import importlib.util
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
GENERATED = ROOT / "src" / "kopf_csi" / "csi" / "_generated"


def _tree(path: pathlib.Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(path)): p.read_bytes()
        for p in sorted(path.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


@pytest.mark.skipif(
    importlib.util.find_spec("grpc_tools") is None, reason="grpcio-tools (protos group) missing"
)
def test_committed_stubs_match_protos(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "generated"
    subprocess.run(
        [sys.executable, str(ROOT / "tools" / "protogen.py"), str(ROOT / "protos"), str(out)],
        check=True,
        capture_output=True,
    )
    fresh, committed = _tree(out), _tree(GENERATED)
    assert sorted(fresh) == sorted(committed), "files differ: run `nox -s protos`"
    drifted = [name for name in fresh if fresh[name] != committed[name]]
    assert not drifted, f"stubs drifted from protos/: {drifted}; run `nox -s protos`"
    assert not filecmp.dircmp(out, GENERATED).diff_files


def _descriptor(tmp_path: pathlib.Path) -> object:
    pytest.importorskip("grpc_tools")
    from google.protobuf import descriptor_pb2

    out = tmp_path / "csi.pb"
    subprocess.run(
        [
            sys.executable, "-m", "grpc_tools.protoc", f"-I{ROOT / 'protos'}",
            "--include_imports", f"--descriptor_set_out={out}", "csi/v1/csi.proto",
        ],
        check=True,
    )  # fmt: skip
    fds = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    return next(f for f in fds.file if f.name == "csi/v1/csi.proto")


SPEC_RPCS = {
    "Identity": {"GetPluginInfo", "GetPluginCapabilities", "Probe"},
    "Controller": {
        "CreateVolume", "DeleteVolume", "ControllerPublishVolume", "ControllerUnpublishVolume",
        "ValidateVolumeCapabilities", "ListVolumes", "GetCapacity", "ControllerGetCapabilities",
        "CreateSnapshot", "DeleteSnapshot", "ListSnapshots", "GetSnapshot",
        "ControllerExpandVolume", "ControllerGetVolume", "ControllerModifyVolume",
    },
    "GroupController": {
        "GroupControllerGetCapabilities", "CreateVolumeGroupSnapshot",
        "DeleteVolumeGroupSnapshot", "GetVolumeGroupSnapshot",
    },
    "SnapshotMetadata": {"GetMetadataAllocated", "GetMetadataDelta"},
    "Node": {
        "NodeStageVolume", "NodeUnstageVolume", "NodePublishVolume", "NodeUnpublishVolume",
        "NodeGetVolumeStats", "NodeExpandVolume", "NodeGetCapabilities", "NodeGetInfo",
    },
}  # fmt: skip


def test_every_service_and_rpc_of_the_spec(tmp_path: pathlib.Path) -> None:
    proto = _descriptor(tmp_path)
    services = {s.name: {m.name: m for m in s.method} for s in proto.service}  # type: ignore[attr-defined]
    assert {name: set(methods) for name, methods in services.items()} == SPEC_RPCS
    streaming = {
        (service, name)
        for service, methods in services.items()
        for name, method in methods.items()
        if method.server_streaming or method.client_streaming
    }
    assert streaming == {
        ("SnapshotMetadata", "GetMetadataAllocated"),
        ("SnapshotMetadata", "GetMetadataDelta"),
    }
    for name in ("GetMetadataAllocated", "GetMetadataDelta"):
        assert services["SnapshotMetadata"][name].server_streaming
        assert not services["SnapshotMetadata"][name].client_streaming


def test_secret_fields_are_all_named_secrets(tmp_path: pathlib.Path) -> None:
    proto = _descriptor(tmp_path)

    def walk(messages: object, prefix: str = "") -> list[tuple[str, str, bool]]:
        found = []
        for message in messages:  # type: ignore[attr-defined]
            for field in message.field:
                # (csi_secret) = true: extension 1059, varint 1 -> bytes 98 42 01 on the wire.
                marked = b"\x98\x42\x01" in field.options.SerializeToString()
                found.append((prefix + message.name, field.name, marked))
            found.extend(walk(message.nested_type, prefix + message.name + "."))
        return found

    fields = walk(proto.message_type)  # type: ignore[attr-defined]
    named = {(m, f) for m, f, _ in fields if f == "secrets"}
    marked = {(m, f) for m, f, is_secret in fields if is_secret}
    assert len(named) == 19
    assert marked == named
