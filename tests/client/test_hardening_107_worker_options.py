"""A Worker's options are checked whenever they are set: when it is made, and by
``configure`` (which the CLI's ``worker --concurrency`` and the like call), whose changes
went unchecked; the times too, which fail only once waited on."""

from __future__ import annotations

import math

import pytest

from queuelog.client import Worker


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("concurrency", 0),
        ("concurrency", True),
        ("concurrency", 2.5),
        ("prefetch", -1),
        ("wait_seconds", 60),
        ("wait_seconds", math.nan),
        ("linger_ms", 5000),
        ("lease_seconds", 0),
        ("instance", "host 1"),
        ("shutdown_seconds", -5),
        ("shutdown_seconds", math.nan),
        ("idle_seconds", -1),
        ("idle_seconds", math.inf),
        ("idle_seconds", "1"),
    ],
)
def test_hardening_107_an_option_out_of_range_is_refused_by_configure_and_when_made(
    option: str, value: object
) -> None:
    # Before, configure(concurrency=0) made a worker that never claimed, and
    # configure(wait_seconds=60) one whose every claim was refused 422 at run time.
    worker = Worker()
    before = worker.options
    with pytest.raises(ValueError, match=option):
        worker.configure(**{option: value})
    assert worker.options == before
    with pytest.raises(ValueError, match=option):
        Worker(**{option: value})


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("concurrency", 8),
        ("prefetch", 0),
        ("wait_seconds", 0),
        ("wait_seconds", 30),
        ("linger_ms", 0),
        ("shutdown_seconds", 0),
        ("idle_seconds", 0.25),
    ],
)
def test_an_option_in_range_is_taken_by_configure(option: str, value: object) -> None:
    worker = Worker()
    worker.configure(**{option: value})
    assert getattr(worker.options, option) == value
