"""Two hot spots of betterproto2 0.10's serialisation, made cheap without changing a byte.

`bytes(message)` (grpclib's encoder calls it for every request) walks every field of every
nested message, and for each one:

- `Message._get_field_default` builds a fresh default, each time inside
  `warnings.catch_warnings()` and `warnings.filterwarnings(...)`, only to compare the value
  with it (`value == default`: a default is not serialised). `install_cached_defaults` gives
  each generated class its defaults computed once, under the same warnings filter. Only
  immutable ones are kept (None, bool, int, float, str, bytes, an enum member); an empty list
  or dict is made anew on each call, as the factory does, so nobody shares a mutable default;
  anything else goes to betterproto2's own method.
- `encode_varint` opens a `BytesIO` and writes byte by byte for every key, length and integer,
  even one byte long. `encode_varint` here gives the same bytes, from a table for 0..127.

Both follow betterproto2 0.10.0 exactly; `BETTERPROTO2_VERSION` is the release they were
checked against, and tests/csi/test_speedups.py fails when the installed one differs, when the
replaced functions' code changes, or when any generated message serialises differently with and
without them (`original_codec()` restores betterproto2's own path, for those tests).
Only kopf_csi.csi imports betterproto2; `kopf_csi.csi.messages` installs these on import.

One more, in the HTTP/2 stack under grpclib: h2 (4.4.1) writes every frame it receives to its
`trace` log, and builds the text first, whether anything logs it or not (`repr(frame)` in
`H2Connection._receive_frame`; grpclib's connections log nowhere). hyperframe's `Frame.__repr__`
serialises a DATA or HEADERS frame's body again to show its first bytes in hex: 0.9 % of the
operator's CPU under churn (docs/benchmarks.md, "Seventh session"). `short_frame_repr` names the
frame's type and stream instead; nothing else reads those texts. `H2_VERSION` and
`HYPERFRAME_VERSION` are the releases checked, and the tests fail when h2 no longer builds the
text (the change would then be useless) or either release differs.
"""

from __future__ import annotations

import contextlib
import enum
import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import betterproto2
import hyperframe.frame

__all__ = [
    "BETTERPROTO2_VERSION",
    "H2_VERSION",
    "HYPERFRAME_VERSION",
    "encode_varint",
    "install",
    "install_cached_defaults",
    "original_codec",
    "short_frame_repr",
]

BETTERPROTO2_VERSION = "0.10.0"
"""The betterproto2 release whose `_get_field_default` and `encode_varint` these replace."""

H2_VERSION = "4.4.1"
"""The h2 release whose `_receive_frame` builds each frame's text for its trace log."""

HYPERFRAME_VERSION = "6.1.0"
"""The hyperframe release whose `Frame.__repr__` `short_frame_repr` replaces."""

ORIGINAL_GET_FIELD_DEFAULT = betterproto2.Message._get_field_default
ORIGINAL_ENCODE_VARINT = betterproto2.encode_varint

_IMMUTABLE = (type(None), bool, int, float, str, bytes)
_FRESH = (list, dict)
_ONE_BYTE = tuple(bytes((value,)) for value in range(0x80))
_INT64_MIN = -(1 << 63)


def encode_varint(value: int) -> bytes:
    """betterproto2's `encode_varint`, the same bytes and the same error, without a stream."""
    if 0 <= value < 0x80:
        return _ONE_BYTE[value]
    if value < _INT64_MIN:
        raise ValueError(
            "Negative value is not representable as a 64-bit integer - unable to encode a "
            "varint within 10 bytes."
        )
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while value > 0x7F:
        out.append(0x80 | (value & 0x7F))
        value >>= 7
    out.append(value)
    return bytes(out)


def _defaults(cls: type[betterproto2.Message]) -> tuple[dict[str, Any], dict[str, type]]:
    """(immutable defaults, types of the empty list/dict defaults) of one class, by field."""
    constants: dict[str, Any] = {}
    fresh: dict[str, type] = {}
    with warnings.catch_warnings():
        # the same filter as betterproto2's: deprecated fields' defaults warn when made
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        for name, make in cls._betterproto.default_gen.items():  # type: ignore[arg-type]
            value = make()
            if type(value) in _IMMUTABLE or isinstance(value, enum.Enum):
                constants[name] = value
            elif type(value) in _FRESH and not value:
                fresh[name] = type(value)
    return constants, fresh


def _cached_field_default(self: betterproto2.Message, field_name: str) -> Any:
    cls = type(self)
    cached: tuple[dict[str, Any], dict[str, type]] | None = cls.__dict__.get("_kopf_csi_defaults")
    if cached is None:
        cached = _defaults(cls)
        type.__setattr__(cls, "_kopf_csi_defaults", cached)
    constants, fresh = cached
    try:
        return constants[field_name]
    except KeyError:
        pass
    empty = fresh.get(field_name)
    if empty is not None:
        return empty()
    return ORIGINAL_GET_FIELD_DEFAULT(self, field_name)


def install_cached_defaults(modules: Iterable[object]) -> None:
    """Every generated message class of `modules` looks its field defaults up, once made."""
    for module in modules:
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, betterproto2.Message):
                value._get_field_default = _cached_field_default  # type: ignore[method-assign]


def short_frame_repr(frame: hyperframe.frame.Frame) -> str:
    """A frame's type and stream, e.g. `DataFrame(stream_id=3)`."""
    return f"{type(frame).__name__}(stream_id={frame.stream_id})"


def install(modules: Iterable[object]) -> None:
    """All three: the cached defaults on `modules`' classes, and process-wide the varint
    encoder (betterproto2's serialiser looks `encode_varint` up in its module on every call)
    and the short frame texts."""
    install_cached_defaults(modules)
    betterproto2.encode_varint = encode_varint
    hyperframe.frame.Frame.__repr__ = short_frame_repr  # type: ignore[method-assign]


@contextlib.contextmanager
def original_codec(classes: Iterable[type]) -> Iterator[None]:
    """betterproto2's own pure-Python path inside (for tests that compare the two)."""
    saved: list[tuple[type, Callable[..., Any]]] = []
    for cls in classes:
        if "_get_field_default" in cls.__dict__:
            saved.append((cls, cls.__dict__["_get_field_default"]))
            delattr(cls, "_get_field_default")
    varint = betterproto2.encode_varint
    betterproto2.encode_varint = ORIGINAL_ENCODE_VARINT
    try:
        yield
    finally:
        betterproto2.encode_varint = varint
        for cls, method in saved:
            type.__setattr__(cls, "_get_field_default", method)
