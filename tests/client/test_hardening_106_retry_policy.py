"""A ``RetryPolicy`` is checked when it is made, not when a send fails and it must wait."""

from __future__ import annotations

import math

import pytest

from queuelog.client import RetryPolicy


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("attempts", 0),
        ("attempts", -1),
        ("attempts", 1.5),
        ("attempts", True),
        ("base_delay", -1),
        ("base_delay", math.nan),
        ("base_delay", math.inf),
        ("max_delay", -0.5),
        ("max_delay", math.nan),
        ("max_delay", "5"),
    ],
)
def test_hardening_106_a_retry_policy_that_cannot_wait_is_refused_when_made(
    option: str, value: object
) -> None:
    # Else a server away made the client sleep a negative or NaN time: "sleep length must
    # be non-negative" from inside the call, instead of ServerUnavailable after its tries.
    with pytest.raises(ValueError, match=option):
        RetryPolicy(**{option: value})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "policy",
    [
        {},
        {"attempts": 1},
        {"base_delay": 0, "max_delay": 0},
        {"base_delay": 0.01, "max_delay": 300},
    ],
)
def test_a_retry_policy_of_tries_and_delays_is_made(policy: dict[str, float]) -> None:
    made = RetryPolicy(**policy)  # type: ignore[arg-type]
    assert 0 <= made.delay(2) <= made.max_delay
