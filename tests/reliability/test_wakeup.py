"""The wake-up hub at shutdown: waiting claims answer at once, later ones do not wait."""

from __future__ import annotations

import threading
import time
from typing import Any

from tests.conftest import Api


def test_closing_the_wakeup_answers_a_waiting_claim_at_once(client: Any, worker: Api) -> None:
    answers: list[Any] = []
    thread = threading.Thread(
        target=lambda: answers.append(worker.post("/jobs/claim", json={"wait_seconds": 30})),
        daemon=True,
    )
    started = time.monotonic()
    thread.start()
    time.sleep(0.3)
    client.app.state.queuelog.wakeup.close()
    thread.join(timeout=20)
    assert answers and answers[0].status_code == 200
    assert answers[0].json() == {"jobs": []}
    assert time.monotonic() - started < 20


def test_claims_after_close_do_not_wait_but_still_claim(
    client: Any, producer: Api, worker: Api
) -> None:
    client.app.state.queuelog.wakeup.close()
    started = time.monotonic()
    assert worker.post("/jobs/claim", json={"wait_seconds": 30}).json() == {"jobs": []}
    assert time.monotonic() - started < 20
    job = producer.post("/jobs", json={"type": "noop"}).json()
    jobs = worker.post("/jobs/claim", json={"wait_seconds": 30}).json()["jobs"]
    assert [j["id"] for j in jobs] == [job["id"]]
