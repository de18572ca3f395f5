"""The SDK's ``run_at`` is a datetime: anything else is a TypeError naming it, raised
before anything is sent (a string was an AttributeError from inside the SDK)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from queuelog.client import calls


@pytest.mark.parametrize("run_at", ["2030-01-01T00:00:00Z", 1893456000, 1893456000.5])
def test_hardening_109_a_run_at_that_is_no_datetime_is_a_type_error_naming_it(
    run_at: object,
) -> None:
    with pytest.raises(TypeError, match="run_at must be a datetime"):
        calls.enqueue("mail", {}, run_at=run_at)  # type: ignore[typeddict-item]
    with pytest.raises(TypeError, match="run_at must be a datetime"):
        calls.enqueue_many([calls.enqueue_body("mail", {}, run_at=run_at)])  # type: ignore[typeddict-item]


def test_a_datetime_run_at_is_sent_in_utc() -> None:
    body = calls.enqueue_body("mail", {}, run_at=datetime(2030, 1, 1, tzinfo=UTC))
    assert body["run_at"] == "2030-01-01T00:00:00.000000Z"
