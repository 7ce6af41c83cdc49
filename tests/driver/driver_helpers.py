"""Request builders and assertions shared by the driver's tests (imported, not fixtures)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
from grpclib.exceptions import GRPCError

from kopf_csi.csi._generated.csi import v1 as csi
from kopf_csi.csi.codes import Code
from tests.conftest import Start as Start  # the `start` fixture's type, for the tests here

NODE = "node-1"
Mode = csi.VolumeCapabilityAccessModeMode


def mount(mode: str = "SINGLE_NODE_WRITER", *, fs_type: str = "") -> csi.VolumeCapability:
    return csi.VolumeCapability(
        mount=csi.VolumeCapabilityMountVolume(fs_type=fs_type),
        access_mode=csi.VolumeCapabilityAccessMode(Mode.from_string(mode)),
    )


def block(mode: str = "SINGLE_NODE_WRITER") -> csi.VolumeCapability:
    return csi.VolumeCapability(
        block=csi.VolumeCapabilityBlockVolume(),
        access_mode=csi.VolumeCapabilityAccessMode(Mode.from_string(mode)),
    )


def create_request(
    name: str = "pvc-1",
    *,
    size: int = 1024**2,
    limit: int = 0,
    caps: list[csi.VolumeCapability] | None = None,
    **fields: Any,
) -> csi.CreateVolumeRequest:
    return csi.CreateVolumeRequest(
        name=name,
        capacity_range=csi.CapacityRange(required_bytes=size, limit_bytes=limit),
        volume_capabilities=caps if caps is not None else [mount()],
        **fields,
    )


async def create(
    controller: csi.ControllerStub, name: str = "pvc-1", *, call_timeout: float = 5.0, **kwargs: Any
) -> csi.Volume:
    response = await controller.create_volume(create_request(name, **kwargs), timeout=call_timeout)
    assert response.volume is not None
    return response.volume


def topology(node_id: str) -> csi.Topology:
    return csi.Topology(segments={"topology.hostpath.csi.kopf.dev/node": node_id})


@contextlib.contextmanager
def raises(code: Code, match: str | None = None) -> Iterator[None]:
    """Expect the RPC inside to fail with `code` (and a message matching `match`)."""
    with pytest.raises(GRPCError) as err:
        yield
    assert Code(err.value.status.value) is code, err.value.message
    if match is not None:
        assert match in (err.value.message or ""), err.value.message
