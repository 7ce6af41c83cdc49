"""`until()`'s failure names what was waited for: the lambda as written, and its last value."""

from __future__ import annotations

import pytest

from kopf_csi.testing.pytest_plugin import until


async def test_a_timeout_names_the_lambda_by_its_source_and_its_last_value() -> None:
    volumes: list[str] = []
    with pytest.raises(AssertionError) as info:
        await until(lambda: [v for v in volumes if v.startswith("pvc-")], timeout=0.1)
    message = str(info.value)
    assert message.startswith("not true within 0.1s: ")
    assert 'lambda: [v for v in volumes if v.startswith("pvc-")]' in message
    assert message.endswith("(last: [])")


async def test_a_predicate_without_source_is_named_by_its_repr() -> None:
    with pytest.raises(AssertionError, match=r"not true within 0.05s: <class 'dict'> \(last: {}\)"):
        await until(dict, timeout=0.05)
