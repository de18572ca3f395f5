"""A claim that rescues expired leases on its way wakes the long polls those leases held
back, as the sweeper's rescue does: the job put back to pending is ready again, and a job
failed for good frees its slot of the type's ``concurrency``."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from queuelog.clock import FakeClock
from queuelog.config import Settings
from tests.api.test_claim_wakeups import WAIT, claims, until
from tests.conftest import TYPES, Api, claim_one, enqueue, make_settings


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    # No recheck and no sweep within the test: a poll looks again only when it is woken,
    # and only a claim rescues an expired lease.
    types = {
        **TYPES,
        "again": {"max_retries": 1, "backoff_base_seconds": 0},
        "one_at_a_time": {"max_retries": 0, "concurrency": 1},
    }
    return make_settings(
        tmp_path,
        types=types,
        sweep_interval_seconds=3600,
        server={"claim_recheck_seconds": 30},
    )


@pytest.fixture
def poll(worker: Api, admin: Api) -> Iterator[Any]:
    """``poll(type)`` starts a long poll of one job of ``type`` and returns once it has
    looked once and is waiting; its answer fills the list returned."""
    threads: list[threading.Thread] = []

    def start(job_type: str) -> list[dict[str, Any]]:
        answers: list[dict[str, Any]] = []
        before = claims(admin).get("false", 0)
        body = {"types": [job_type], "wait_seconds": WAIT}
        thread = threading.Thread(
            target=lambda: answers.append(worker.post("/jobs/claim", json=body).json()),
            daemon=True,
        )
        threads.append(thread)
        thread.start()
        until(lambda: claims(admin).get("false", 0) == before + 1, "the poll to wait")
        return answers

    yield start
    for thread in threads:
        thread.join(timeout=WAIT + 10)


def _rescue_by_another_claim(worker: Api, clock: FakeClock) -> float:
    clock.advance(2)  # past the 1 s lease
    assert worker.post("/jobs/claim", json={"types": ["noop"]}).json() == {"jobs": []}
    return time.monotonic()


def _answered_soon(answers: list[dict[str, Any]], since: float) -> dict[str, Any]:
    """The poll's answer, which came at once: not at the end of its wait (the poll's
    last look there would find the job too)."""
    until(lambda: len(answers) == 1, "the woken poll's answer")
    assert time.monotonic() - since < WAIT / 4
    return answers[0]


def test_hardening_90_a_lease_another_claim_rescues_wakes_a_poll_for_its_type(
    producer: Api, worker: Api, clock: FakeClock, poll: Any
) -> None:
    job = enqueue(producer, "again")
    claim_one(worker, types=["again"], lease_seconds=1)
    answers = poll("again")
    since = _rescue_by_another_claim(worker, clock)
    assert [j["id"] for j in _answered_soon(answers, since)["jobs"]] == [job["id"]]


def test_hardening_90_a_slot_a_claim_s_rescue_frees_wakes_a_poll_held_back_by_it(
    producer: Api, worker: Api, clock: FakeClock, poll: Any
) -> None:
    enqueue(producer, "one_at_a_time")
    claim_one(worker, types=["one_at_a_time"], lease_seconds=1)
    second = enqueue(producer, "one_at_a_time")  # held back by the running one
    answers = poll("one_at_a_time")
    since = _rescue_by_another_claim(worker, clock)
    assert [j["id"] for j in _answered_soon(answers, since)["jobs"]] == [second["id"]]
