"""`kopf_csi.csi.speedups`: the same bytes as betterproto2's own path, and still in effect.

We test these aspects:
- the pin: the installed betterproto2 is the release the speedups follow, its serialiser still
  calls the two replaced functions (else they would silently do nothing), and the replaced
  functions' code is unchanged (else they may no longer be the same);
- `encode_varint`: the same bytes as betterproto2's for any integer, the same error below int64;
- the cached defaults: equal to betterproto2's (value and type) for every field of every
  generated class, and an empty list or dict is never shared between calls;
- every generated message (each CSI request and response the client sends or reads, and every
  nested one), drawn by hypothesis from its fields' metadata (maps, empty vs default values,
  nested messages, oneofs, enums, repeated, optional and wrapper fields): `bytes()` gives the
  same bytes with and without the speedups, and parsing them gives equal messages;
- unknown fields survive a round trip byte for byte.
"""

from __future__ import annotations

import datetime
import hashlib
import importlib.metadata
import inspect
from typing import Any

import betterproto2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kopf_csi.csi import messages as csi
from kopf_csi.csi import speedups
from kopf_csi.csi._generated.csi import v1
from kopf_csi.csi._generated.google import protobuf as wkt

CLASSES = sorted(
    (
        value
        for module in (v1, wkt)
        for value in vars(module).values()
        if isinstance(value, type) and issubclass(value, betterproto2.Message)
    ),
    key=lambda cls: (cls.__module__, cls.__name__),
)
CSI_CLASSES = [cls for cls in CLASSES if cls.__module__ == v1.__name__]
INT_RANGES = {
    betterproto2.TYPE_INT32: (-(2**31), 2**31 - 1),
    betterproto2.TYPE_INT64: (-(2**63), 2**63 - 1),
    betterproto2.TYPE_UINT32: (0, 2**32 - 1),
    betterproto2.TYPE_UINT64: (0, 2**64 - 1),
}
# sha256 of the source of what the speedups replace or rely on, in betterproto2 0.10.0.
PINNED_SOURCES = {
    "Message._get_field_default": (
        "5fedaef741d79be440f44acf13bef4d61dbd53f3ed8631fac4f4e7bf6ac75a0f"
    ),
    "encode_varint": "fc1bf902d8396aa57279551cd962d38834a5ed45795e643ba782437940b1e00f",
    "dump_varint": "7121006a3020c38cfa98e5d314324680d6b2ac6997f0532a6e153a098c3ee001",
}


def _source_digest(obj: Any) -> str:
    return hashlib.sha256(inspect.getsource(obj).encode()).hexdigest()


# -- the pin ------------------------------------------------------------------------------------


def test_betterproto2_is_the_release_the_speedups_follow() -> None:
    assert importlib.metadata.version("betterproto2") == speedups.BETTERPROTO2_VERSION


def test_the_serialiser_still_calls_what_the_speedups_replace() -> None:
    assert "_get_field_default" in betterproto2.Message.__bytes__.__code__.co_names
    assert "encode_varint" in betterproto2._serialize_single.__code__.co_names
    assert "encode_varint" in betterproto2._preprocess_single.__code__.co_names


def test_the_replaced_functions_are_unchanged() -> None:
    digests = {
        "Message._get_field_default": _source_digest(speedups.ORIGINAL_GET_FIELD_DEFAULT),
        "encode_varint": _source_digest(speedups.ORIGINAL_ENCODE_VARINT),
        "dump_varint": _source_digest(betterproto2.dump_varint),
    }
    assert digests == PINNED_SOURCES


def test_installed_on_import() -> None:
    assert betterproto2.encode_varint is speedups.encode_varint
    assert all(
        cls.__dict__.get("_get_field_default") is speedups._cached_field_default for cls in CLASSES
    )


def test_h2_still_builds_every_received_frames_text_and_gets_the_short_one() -> None:
    """The frame text is worth making cheap only while h2 builds it for each frame it reads;
    once installed, it is the short one, for every frame type h2 reads."""
    import h2.connection
    import hyperframe.frame

    assert importlib.metadata.version("h2") == speedups.H2_VERSION
    assert importlib.metadata.version("hyperframe") == speedups.HYPERFRAME_VERSION
    assert "repr(frame)" in inspect.getsource(h2.connection.H2Connection._receive_frame)
    data = hyperframe.frame.DataFrame(3, data=b"\x00" * 4096, flags=["END_STREAM"])
    headers = hyperframe.frame.HeadersFrame(5, data=b"\x82")
    assert (repr(data), repr(headers)) == ("DataFrame(stream_id=3)", "HeadersFrame(stream_id=5)")
    assert all(
        frame_type.__repr__ is speedups.short_frame_repr
        for frame_type in hyperframe.frame.FRAMES.values()
    )


# -- encode_varint ------------------------------------------------------------------------------


EDGES = [0, 1, 0x7F, 0x80, 0x3FFF, 0x4000, 2**31 - 1, 2**32, 2**63 - 1, 2**64 - 1, 2**64, 2**70]
EDGES += [-1, -0x80, -(2**31), -(2**63)]


@pytest.mark.parametrize("value", [*EDGES, True, False, csi.VolumeUsageUnit.BYTES])
def test_varint_edges(value: int) -> None:
    assert speedups.encode_varint(value) == speedups.ORIGINAL_ENCODE_VARINT(value)


def test_varint_every_value_up_to_three_bytes() -> None:
    for value in range(-300, 2**21 + 300, 7):
        assert speedups.encode_varint(value) == speedups.ORIGINAL_ENCODE_VARINT(value), value


@given(st.integers(min_value=-(2**63), max_value=2**72))
def test_varint_any_integer(value: int) -> None:
    assert speedups.encode_varint(value) == speedups.ORIGINAL_ENCODE_VARINT(value)


@pytest.mark.parametrize("value", [-(2**63) - 1, -(2**80)])
def test_varint_below_int64_is_the_same_error(value: int) -> None:
    with pytest.raises(ValueError, match="64-bit") as ours:
        speedups.encode_varint(value)
    with pytest.raises(ValueError, match="64-bit") as theirs:
        speedups.ORIGINAL_ENCODE_VARINT(value)
    assert str(ours.value) == str(theirs.value)


# -- the cached defaults ------------------------------------------------------------------------


@pytest.mark.parametrize("cls", CLASSES, ids=lambda cls: cls.__name__)
def test_defaults_are_betterprotos(cls: type[betterproto2.Message]) -> None:
    message = cls()
    for name in cls._betterproto.meta_by_field_name:
        ours = message._get_field_default(name)
        theirs = speedups.ORIGINAL_GET_FIELD_DEFAULT(message, name)
        assert (type(ours), ours) == (type(theirs), theirs), name
        if isinstance(ours, list | dict):
            assert ours is not message._get_field_default(name), name  # never shared


# -- every message, both ways -------------------------------------------------------------------


def _scalar(proto_type: str, field_cls: Any) -> st.SearchStrategy[Any]:
    if proto_type == betterproto2.TYPE_STRING:
        return st.text(max_size=12)
    if proto_type == betterproto2.TYPE_BOOL:
        return st.booleans()
    if proto_type == betterproto2.TYPE_BYTES:
        return st.binary(max_size=12)
    if proto_type in INT_RANGES:
        low, high = INT_RANGES[proto_type]
        # small values (one-byte varints, zero: the default) as often as large ones
        return st.one_of(st.integers(-2, 130).filter(lambda v: low <= v <= high),
                         st.integers(low, high))  # fmt: skip
    if proto_type == betterproto2.TYPE_ENUM:
        return st.sampled_from(list(field_cls))
    raise NotImplementedError(proto_type)


def _unwrapped(wrapper: type) -> st.SearchStrategy[Any]:
    if wrapper is wkt.Timestamp:
        return st.datetimes(
            min_value=datetime.datetime(1970, 1, 1),
            max_value=datetime.datetime(2200, 1, 1),
            timezones=st.just(datetime.UTC),
        )
    inner = wrapper._betterproto.meta_by_field_name["value"]
    return _scalar(inner.proto_type, None)


def _message(cls: type[betterproto2.Message], depth: int = 0) -> st.SearchStrategy[Any]:
    meta = cls._betterproto
    fields: dict[str, st.SearchStrategy[Any]] = {}
    for name, field in meta.meta_by_field_name.items():
        if field.group:
            continue  # below: one member of each group at most
        fields[name] = _field_value(cls, name, field, depth)
    by_name = meta.meta_by_field_name
    groups = {
        group: [
            (member.name, _field_value(cls, member.name, by_name[member.name], depth))
            for member in sorted(members, key=lambda member: member.name)
        ]
        for group, members in meta.oneof_field_by_group.items()
    }
    choices = [
        st.one_of(st.just({}), *(value.map(lambda v, n=name: {n: v}) for name, value in members))
        for members in groups.values()
    ]

    def build(values: dict[str, Any], chosen: list[dict[str, Any]]) -> betterproto2.Message:
        for one in chosen:
            values.update(one)
        return cls(**values)

    values = st.fixed_dictionaries({}, optional=fields)
    return st.builds(build, values, st.tuples(*choices).map(list))


def _field_value(cls: type, name: str, field: Any, depth: int) -> st.SearchStrategy[Any]:
    by_field = cls._betterproto.cls_by_field
    if field.map_meta:
        key = _scalar(field.map_meta[0].proto_type, None)
        value_meta = field.map_meta[1]
        if value_meta.proto_type == betterproto2.TYPE_MESSAGE:
            value = _message(by_field[f"{name}.value"], depth + 1)
        else:
            value = _scalar(value_meta.proto_type, by_field.get(f"{name}.value"))
        return st.dictionaries(key, value, max_size=3)  # an empty value ("") included
    if field.proto_type == betterproto2.TYPE_MESSAGE:
        if field.unwrap:
            single = _unwrapped(field.unwrap())
        elif depth > 4:
            single = st.just(by_field[name]())
        else:
            single = st.deferred(lambda: _message(by_field[name], depth + 1))
    else:
        single = _scalar(field.proto_type, by_field.get(name))
    if field.repeated:
        return st.lists(single, max_size=3)
    if field.optional:
        return st.one_of(st.none(), single)
    return single


def _both_ways(message: betterproto2.Message) -> None:
    cls = type(message)
    fast = bytes(message)
    parsed_fast = cls.parse(fast)
    with speedups.original_codec(CLASSES):
        pure = bytes(message)
        parsed_pure = cls.parse(pure)
        again = bytes(parsed_pure)
    assert fast == pure
    assert parsed_fast == parsed_pure == message
    assert bytes(parsed_fast) == again


@pytest.mark.parametrize("cls", CSI_CLASSES, ids=lambda cls: cls.__name__)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_message_the_same_bytes(cls: type[betterproto2.Message], data: st.DataObject) -> None:
    _both_ways(data.draw(_message(cls)))


@pytest.mark.parametrize("cls", CSI_CLASSES, ids=lambda cls: cls.__name__)
def test_empty_messages(cls: type[betterproto2.Message]) -> None:
    _both_ways(cls())


def test_a_realistic_create_volume_request() -> None:
    capability = csi.VolumeCapability(
        mount=csi.VolumeCapabilityMountVolume(),  # an empty message, set: still sent
        access_mode=csi.VolumeCapabilityAccessMode(csi.VolumeCapabilityAccessModeMode.UNKNOWN),
    )
    request = csi.CreateVolumeRequest(
        name="pvc-1",
        capacity_range=csi.CapacityRange(required_bytes=0, limit_bytes=2**40),
        volume_capabilities=[
            capability,
            csi.VolumeCapability(block=csi.VolumeCapabilityBlockVolume()),
        ],
        parameters={"type": "ssd", "empty": ""},  # an empty map value is sent as a field too
        secrets={"password": "hunter2"},
        accessibility_requirements=csi.TopologyRequirement(
            requisite=[csi.Topology(segments={"zone": "a"}), csi.Topology()],
        ),
        volume_content_source=csi.VolumeContentSource(
            snapshot=csi.VolumeContentSourceSnapshotSource(snapshot_id="")
        ),
    )
    _both_ways(request)
    assert b'"\t\n\x05empty\x12\x00' in bytes(request)  # the entry: 9 bytes


def test_unknown_fields_round_trip() -> None:
    known = bytes(csi.DeleteVolumeRequest(volume_id="v", secrets={"a": "b"}))
    unknown = b"\xa0\x06\x2a" + b"\xaa\x06\x03xyz"  # fields 100 (varint) and 101 (bytes)
    parsed = csi.DeleteVolumeRequest.parse(known + unknown)
    with speedups.original_codec(CLASSES):
        pure = bytes(parsed)
    assert bytes(parsed) == pure == known + unknown
