"""Go's `os.Expand` templates and the DNS-1123 rules, as the secret templates use them.

We test these aspects:
- `${name}` and `$name` expansion, and Go's corner cases (`${}`, unclosed `${`, trailing `$`,
  special one-character names, names that stop at the first non-alphanumeric);
- unknown names are all collected, sorted, in Go's `%q` list format;
- DNS-1123 labels (namespaces) and subdomains (secret names), lengths included.
"""

from __future__ import annotations

import pytest

from kopf_csi.provisioning import templates

PARAMS = {
    "pv.name": "pvc-1",
    "pvc.name": "data",
    "pvc.namespace": "team",
    "pvc.annotations['example.com/key']": "value",
}


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        pytest.param("plain", "plain", id="no dollar -> unchanged"),
        pytest.param("${pvc.name}", "data", id="braced token -> value"),
        pytest.param("${pvc.namespace}-${pv.name}", "team-pvc-1", id="two tokens -> both"),
        pytest.param(
            "s-${pvc.annotations['example.com/key']}", "s-value", id="annotation token -> value"
        ),
        pytest.param("cost$", "cost$", id="trailing dollar -> kept"),
        pytest.param("a$.b", "a$.b", id="dollar before punctuation -> kept"),
        pytest.param("a${}b", "ab", id="empty braces -> eaten"),
        pytest.param("a${pvc.name", "apvc.name", id="unclosed brace -> only ${ eaten"),
    ],
)
def test_resolve_template(template: str, expected: str) -> None:
    assert templates.resolve_template(template, PARAMS) == expected


@pytest.mark.parametrize(
    ("template", "message"),
    [
        pytest.param("${pvc.uid}", 'invalid tokens: ["pvc.uid"]', id="unknown token -> error"),
        pytest.param("$pvc.name", 'invalid tokens: ["pvc"]', id="unbraced stops at dot -> pvc"),
        pytest.param("${b}${a}${b}", 'invalid tokens: ["a" "b"]', id="several -> sorted unique"),
        pytest.param("$1", 'invalid tokens: ["1"]', id="digit -> one-char special name"),
        pytest.param("${*}", 'invalid tokens: ["*"]', id="braced special -> one-char name"),
        pytest.param("$_x9", 'invalid tokens: ["_x9"]', id="underscore and digits -> one name"),
    ],
)
def test_unknown_tokens_fail(template: str, message: str) -> None:
    with pytest.raises(templates.TemplateError) as info:
        templates.resolve_template(template, PARAMS)
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("value", "label", "subdomain"),
    [
        pytest.param("team", True, True, id="lower word -> both"),
        pytest.param("team-1", True, True, id="dash inside -> both"),
        pytest.param("a.b", False, True, id="dotted -> subdomain only"),
        pytest.param("", False, False, id="empty -> neither"),
        pytest.param("Team", False, False, id="upper case -> neither"),
        pytest.param("-team", False, False, id="leading dash -> neither"),
        pytest.param("team-", False, False, id="trailing dash -> neither"),
        pytest.param("a_b", False, False, id="underscore -> neither"),
        pytest.param("a" * 63, True, True, id="63 chars -> both"),
        pytest.param("a" * 64, False, True, id="64 chars -> subdomain only"),
        pytest.param(".".join(["a" * 63] * 4)[:253], False, True, id="253 chars -> subdomain"),
        pytest.param(".".join(["a" * 63] * 4), False, False, id="255 chars -> neither"),
    ],
)
def test_dns1123(value: str, label: bool, subdomain: bool) -> None:
    assert templates.is_dns1123_label(value) is label
    assert templates.is_dns1123_subdomain(value) is subdomain
