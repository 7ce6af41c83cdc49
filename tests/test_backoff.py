"""The queue's per-key exponential backoff, as client-go's `ItemExponentialFailureRateLimiter`.

We test these aspects:
- 1 s, 2 s, 4 s ... doubling from the first failure, capped at the maximum, forever;
- custom start and maximum (the `--retry-interval-*` flags);
- no failures means no delay.
"""

from __future__ import annotations

import pytest

from kopf_csi.queueing import next_delay


@pytest.mark.parametrize(
    ("failures", "expected"),
    [
        pytest.param(0, 0.0, id="no failure -> no delay"),
        pytest.param(1, 1.0, id="first failure -> start"),
        pytest.param(2, 2.0, id="second -> doubled"),
        pytest.param(5, 16.0, id="fifth -> 2**4"),
        pytest.param(9, 256.0, id="ninth -> 256s, under the cap"),
        pytest.param(10, 300.0, id="tenth -> capped at 5 min"),
        pytest.param(10_000, 300.0, id="forever -> still capped, no overflow"),
    ],
)
def test_default_backoff(failures: int, expected: float) -> None:
    assert next_delay(failures) == expected


def test_custom_intervals() -> None:
    assert [next_delay(n, start=0.5, maximum=3) for n in (1, 2, 3, 4)] == [0.5, 1.0, 2.0, 3]
