"""Go's formatting of values inside error texts, so that our event messages match byte for byte.

The Go sidecars build their user-facing errors with `fmt.Errorf`, and users (and their alerting)
see those texts verbatim in events. Where a message embeds a value with `%q` or `%v`, the value
is rendered here the way Go renders it: `go_quote` is `strconv.Quote`, `go_list` is `%v` of a
slice, `go_map` is `%v` of a map (Go sorts map keys when printing). `parse_bool` is
`strconv.ParseBool`, which the annotations we read are parsed with.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

__all__ = ["go_list", "go_map", "go_quote", "go_quote_list", "parse_bool"]

_ESCAPES = {
    "\a": r"\a",
    "\b": r"\b",
    "\f": r"\f",
    "\n": r"\n",
    "\r": r"\r",
    "\t": r"\t",
    "\v": r"\v",
    "\\": r"\\",
    '"': r"\"",
}
_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


def go_quote(text: str) -> str:
    """`%q` of a string: double-quoted, with Go's escapes for non-printable characters."""
    parts = ['"']
    for char in text:
        code = ord(char)
        if char in _ESCAPES:
            parts.append(_ESCAPES[char])
        elif char.isprintable():  # like unicode.IsPrint: the ASCII space is the only space
            parts.append(char)
        elif code < 0x20 or code == 0x7F:
            parts.append(f"\\x{code:02x}")
        elif code < 0x10000:
            parts.append(f"\\u{code:04x}")
        else:
            parts.append(f"\\U{code:08x}")
    parts.append('"')
    return "".join(parts)


def go_quote_list(items: Iterable[str]) -> str:
    """`%q` of a `[]string`: `["a" "b"]`."""
    return "[" + " ".join(go_quote(item) for item in items) + "]"


def go_list(items: Iterable[object]) -> str:
    """`%v` of a slice: `[a b]`."""
    return "[" + " ".join(str(item) for item in items) + "]"


def go_map(items: Mapping[str, object] | None) -> str:
    """`%v` of a `map[string]string`: `map[a:1 b:2]`, keys sorted as Go prints them."""
    pairs = sorted((items or {}).items())
    return "map[" + " ".join(f"{key}:{value}" for key, value in pairs) + "]"


def parse_bool(text: str) -> bool:
    """`strconv.ParseBool`; raises `ValueError` with Go's message for anything else."""
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f"strconv.ParseBool: parsing {go_quote(text)}: invalid syntax")
