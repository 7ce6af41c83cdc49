"""Go's `os.Expand` templates (`${pvc.name}`) and the DNS-1123 name rules their results obey.

StorageClass secret parameters are templates; external-provisioner expands them with Go's
`os.Expand`, whose corner cases we keep: `$name` without braces, `${}` and an unclosed `${`
are eaten, a lone `$` at the end stays. Every unknown name is collected into one error.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from kopf_csi.provisioning import gofmt

__all__ = ["TemplateError", "is_dns1123_label", "is_dns1123_subdomain", "resolve_template"]

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_LABEL_RE = re.compile(_LABEL)
_SUBDOMAIN_RE = re.compile(rf"{_LABEL}(\.{_LABEL})*")
_SPECIAL = frozenset("*#$@!?-0123456789")


class TemplateError(ValueError):
    """A template names a token we do not have; the message is Go's."""


def is_dns1123_label(value: str) -> bool:
    """A namespace name: lower-case alphanumerics and `-`, at most 63 characters."""
    return len(value) <= 63 and _LABEL_RE.fullmatch(value) is not None


def is_dns1123_subdomain(value: str) -> bool:
    """A secret name: dot-separated DNS-1123 labels, at most 253 characters."""
    return len(value) <= 253 and _SUBDOMAIN_RE.fullmatch(value) is not None


def resolve_template(template: str, params: Mapping[str, str]) -> str:
    """Go's `os.Expand` of `$name` and `${name}`; any unknown name is an error, as in Go."""
    missing: set[str] = set()
    parts: list[str] = []
    i = j = 0
    while j < len(template):
        if template[j] == "$" and j + 1 < len(template):
            parts.append(template[i:j])
            name, width = _shell_name(template[j + 1 :])
            if not name and width == 0:
                parts.append("$")  # valid syntax, no name: keep the dollar
            elif name and name in params:
                parts.append(params[name])
            elif name:
                missing.add(name)
            # A bad `${` or `${}` is eaten, as Go does.
            j += width
            i = j + 1
        j += 1
    parts.append(template[i:])
    if missing:
        raise TemplateError(f"invalid tokens: {gofmt.go_quote_list(sorted(missing))}")
    return "".join(parts)


def _shell_name(text: str) -> tuple[str, int]:
    """Go's `getShellName`: the name after a `$` and how many characters it took."""
    if text[0] == "{":
        if len(text) > 2 and text[1] in _SPECIAL and text[2] == "}":
            return text[1], 3
        end = text.find("}", 1)
        if end == 1:
            return "", 2  # "${}"
        if end == -1:
            return "", 1  # "${" without a closing brace
        return text[1:end], end + 1
    if text[0] in _SPECIAL:
        return text[0], 1
    width = 0
    while width < len(text) and (
        text[width] == "_" or (text[width].isascii() and text[width].isalnum())
    ):
        width += 1
    return text[:width], width
