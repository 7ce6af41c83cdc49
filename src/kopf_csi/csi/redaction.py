"""Keep secrets out of logs, reprs and error texts.

CSI marks every secret-bearing field with the `csi_secret` option, and every such field is named
`secrets` (19 of them in v1.12). betterproto drops custom options, so we go by the name, as the
Go sidecars' protosanitizer does by option. Values are replaced by the same marker it uses.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import betterproto2

__all__ = ["STRIPPED", "install_redacted_reprs", "redact", "scrub"]

STRIPPED = "***stripped***"
SECRET_FIELDS = frozenset({"secrets"})


def redact(message: betterproto2.Message) -> dict[str, Any]:
    """The message as a plain dict (proto field names), every `secrets` map stripped."""
    raw = message.to_dict(casing=betterproto2.Casing.SNAKE)
    stripped: dict[str, Any] = _strip(raw)
    return stripped


def _strip(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {
            key: (STRIPPED if key in SECRET_FIELDS and val else _strip(val))
            for key, val in value.items()
        }
    if isinstance(value, list):
        return [_strip(item) for item in value]
    return value


def secret_values(message: betterproto2.Message) -> list[str]:
    """Every secret value carried anywhere in the message (top level is where CSI puts them)."""
    found: list[str] = []
    for name in SECRET_FIELDS:
        values = getattr(message, name, None)
        if isinstance(values, Mapping):
            found.extend(str(v) for v in values.values() if v)
    return found


def scrub(text: str, secrets: Iterable[str]) -> str:
    """Replace any secret value a driver may have echoed into an error message."""
    for value in sorted(set(secrets), key=len, reverse=True):
        if value:
            text = text.replace(value, STRIPPED)
    return text


def _redacted_repr(self: betterproto2.Message) -> str:
    return f"{type(self).__name__}({redact(self)!r})"


def install_redacted_reprs(classes: Iterable[type]) -> None:
    """Make `repr()`/`str()` of the generated messages print stripped secrets."""
    for cls in classes:
        if isinstance(cls, type) and issubclass(cls, betterproto2.Message):
            for dunder in ("__repr__", "__str__"):
                setattr(cls, dunder, _redacted_repr)
