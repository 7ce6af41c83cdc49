"""Go's `%q`, `%v` and `strconv.ParseBool`, which our error texts must reproduce.

We test these aspects:
- `%q` escapes exactly what `strconv.Quote` escapes, and nothing else;
- `%v` of slices and (key-sorted) maps;
- `ParseBool` accepts Go's spellings only, with Go's error.
"""

from __future__ import annotations

import pytest

from kopf_csi.provisioning import gofmt


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("abc", '"abc"', id="plain -> quoted"),
        pytest.param("", '""', id="empty -> empty quotes"),
        pytest.param('a"b\\c', '"a\\"b\\\\c"', id="quote and backslash -> escaped"),
        pytest.param("a\nb\tc", '"a\\nb\\tc"', id="control escapes -> short forms"),
        pytest.param("\x01\x7f", '"\\x01\\x7f"', id="other controls -> hex"),
        pytest.param("\u0085", '"\\u0085"', id="C1 control -> unicode escape"),
        pytest.param("\u00a0", '"\\u00a0"', id="non-breaking space -> escaped like Go"),
        pytest.param("héllo ☃", '"héllo ☃"', id="printable unicode -> kept"),
        pytest.param("\U000e0001", '"\\U000e0001"', id="astral non-printable -> long escape"),
    ],
)
def test_go_quote(text: str, expected: str) -> None:
    assert gofmt.go_quote(text) == expected


def test_go_quote_list() -> None:
    assert gofmt.go_quote_list(["a", "b c"]) == '["a" "b c"]'


def test_go_list_and_map() -> None:
    assert gofmt.go_list(["a", "b"]) == "[a b]"
    assert gofmt.go_list([]) == "[]"
    assert gofmt.go_map({"z": "1", "a": "2"}) == "map[a:2 z:1]"
    assert gofmt.go_map(None) == "map[]"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        *(
            pytest.param(t, True, id=f"{t} -> true")
            for t in ("1", "t", "T", "TRUE", "true", "True")
        ),
        *(
            pytest.param(t, False, id=f"{t} -> false")
            for t in ("0", "f", "F", "FALSE", "false", "False")
        ),
    ],
)
def test_parse_bool(text: str, expected: bool) -> None:
    assert gofmt.parse_bool(text) is expected


@pytest.mark.parametrize("text", ["yes", "tRUE", "", " true"], ids=lambda t: f"{t!r} -> error")
def test_parse_bool_rejects(text: str) -> None:
    with pytest.raises(ValueError, match=r"^strconv.ParseBool: parsing .*: invalid syntax$"):
        gofmt.parse_bool(text)
