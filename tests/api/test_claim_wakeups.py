"""Which waiting long polls an enqueue wakes: as many as there are new jobs, of the types
they may take; each woken one looks in the database (``queuelog_claims_total``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from queuelog.config import Settings
from tests.conftest import Api, enqueue, make_settings

WAIT = 20  # seconds each long poll may wait: far beyond the test's own steps
DEADLINE = 30.0


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    # No recheck within the test: a poll looks again only when it is woken.
    return make_settings(tmp_path, server={"claim_recheck_seconds": 30})


def claims(admin: Api) -> dict[str, float]:
    """``queuelog_claims_total`` by ``found``."""
    text = admin.get("/metrics").text
    return {
        s.labels["found"]: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "queuelog_claims_total"
    }


def until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


@pytest.fixture
def polls(worker: Api, admin: Api) -> Iterator[Callable[..., list[dict[str, Any]]]]:
    """``polls(n, types=[...])`` starts n long polls of one job each and returns once each
    has looked once and is waiting; the list fills with each one's answer."""
    threads: list[threading.Thread] = []

    def start(count: int, **body: Any) -> list[dict[str, Any]]:
        answers: list[dict[str, Any]] = []
        before = claims(admin).get("false", 0)

        def poll() -> None:
            response = worker.post("/jobs/claim", json={"wait_seconds": WAIT, **body})
            answers.append(response.json())

        for _ in range(count):
            threads.append(threading.Thread(target=poll, daemon=True))
            threads[-1].start()
        until(lambda: claims(admin).get("false", 0) == before + count, "the polls to wait")
        return answers

    yield start
    for thread in threads:
        thread.join(timeout=WAIT + DEADLINE)


def test_one_enqueued_job_wakes_one_of_three_waiting_polls(
    producer: Api, admin: Api, polls: Callable[..., list[dict[str, Any]]]
) -> None:
    answers = polls(3)
    looked = claims(admin)
    job = enqueue(producer)
    until(lambda: len(answers) == 1, "the woken poll's answer")
    assert answers[0]["jobs"][0]["id"] == job["id"]
    after = claims(admin)
    assert after["true"] == looked.get("true", 0) + 1
    assert after["false"] == looked["false"]  # the two others did not look
    jobs = producer.post("/jobs/batch", json={"jobs": [{"type": "noop"}] * 2})
    assert jobs.status_code == 200, jobs.text
    until(lambda: len(answers) == 3, "the two other polls' answers")
    assert all(len(a["jobs"]) == 1 for a in answers)


def test_a_poll_for_other_types_is_not_woken(
    producer: Api, admin: Api, polls: Callable[..., list[dict[str, Any]]]
) -> None:
    others = polls(1, types=["send_email"])
    answers = polls(1, types=["noop"])
    looked = claims(admin)
    enqueue(producer)
    until(lambda: len(answers) == 1, "the noop poll's answer")
    assert claims(admin) == {"true": looked.get("true", 0) + 1, "false": looked["false"]}
    assert others == []  # still waiting, never woken
    enqueue(producer, "send_email", payload={"to": "a@example.com"})
    until(lambda: len(others) == 1, "the send_email poll's answer")


def test_hardening_102_an_enqueue_wakes_claims_per_type_of_the_jobs_it_made_ready(
    producer: Api, admin: Api, polls: Callable[..., list[dict[str, Any]]]
) -> None:
    """A batch of a ready job and a job that waits for another: the ready job's claim is
    woken, however many claims wait for the other job's type (counted together, the two
    wake-ups went to any two of them, most likely both of the other type)."""
    email = {"to": "a@example.com"}
    dependency = enqueue(producer, "send_email", payload=email)  # no poll takes it
    for _ in range(4):  # each round left the ready job's poll unwoken 13 times in 15
        others = polls(14, types=["resize_image"], wait_seconds=2)
        mine = polls(1, types=["noop"])
        items = [{"type": "noop"}, {"type": "resize_image", "depends_on": [dependency["id"]]}]
        assert producer.post("/jobs/batch", json={"jobs": items}).status_code == 200
        deadline = time.monotonic() + 10  # far less than the 30 s recheck
        while not mine and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(mine) == 1 and len(mine[0]["jobs"]) == 1, "the noop poll was not woken"
        until(lambda ended=others: len(ended) == 14, "the other polls' ends")  # 2 s, empty
