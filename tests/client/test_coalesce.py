"""Enqueues made at once by threads of one client travel as one batch, each answered alone."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from contextlib import closing
from typing import Any

import pytest

from queuelog.client import Client, Job
from queuelog.errors import QueueError
from tests.client.pools import Noting, Sent
from tests.realserver import RealServer, wait_until

DEADLINE = 60.0  # seconds any single wait here may take, on a busy machine


class FirstHeldBack(Noting):
    """Notes every request; holds the first one back until ``gate`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()

    def forward(self, sent: Sent, send: Callable[[], Any]) -> Any:
        if sent is self.sent[0]:
            assert self.gate.wait(DEADLINE)
        return send()


def enqueue_at_once(server: RealServer, jobs: list[dict[str, Any]]) -> tuple[list[Any], list[str]]:
    """Each job enqueued by a thread of its own on one client, the others calling while
    the first one's request is held back; each call's job or error, and the requests."""
    transport = FirstHeldBack()
    client = Client(server.url, server.keys["shop"], transport=transport)
    answers: list[Any] = [None] * len(jobs)

    def call(i: int) -> None:
        try:
            answers[i] = client.enqueue(**jobs[i])
        except QueueError as error:
            answers[i] = error

    threads = [threading.Thread(target=call, args=(i,), daemon=True) for i in range(len(jobs))]
    threads[0].start()
    wait_until(lambda: bool(transport.sent), "the first enqueue on its way")
    for thread in threads[1:]:
        thread.start()
    time.sleep(0.3)  # the others call meanwhile, and queue behind it
    transport.gate.set()
    for thread in threads:
        thread.join(DEADLINE)
    client.close()
    assert not any(t.is_alive() for t in threads), "an enqueue was never answered"
    return answers, transport.paths()


def test_enqueues_made_at_once_travel_together_each_answered_with_its_own_job(
    real_server: RealServer,
) -> None:
    marker = uuid.uuid4().hex
    jobs = [{"type": "noop", "payload": {"marker": marker, "n": n}} for n in range(16)]
    answers, sent = enqueue_at_once(real_server, jobs)
    assert all(isinstance(a, Job) for a in answers)
    assert [a.payload["n"] for a in answers] == list(range(16))
    assert len({a.id for a in answers}) == 16
    assert "POST /jobs/batch" in sent
    assert len(sent) < 16
    with Client(real_server.url, real_server.keys["root"]) as root:
        stored = [j for j in root.list(type="noop") if j.payload.get("marker") == marker]
    assert sorted(j.id for j in stored) == sorted(a.id for a in answers)


def test_a_batch_refused_as_a_whole_answers_each_call_with_its_own_outcome(
    real_server: RealServer,
) -> None:
    jobs: list[dict[str, Any]] = [{"type": "noop", "payload": {"n": n}} for n in range(6)]
    jobs[3] = {"type": "no_such_type", "payload": {"n": 3}}
    answers, sent = enqueue_at_once(real_server, jobs)
    assert isinstance(answers[3], QueueError)
    assert answers[3].status == 422
    assert [a.payload["n"] for i, a in enumerate(answers) if i != 3] == [0, 1, 2, 4, 5]
    assert "POST /jobs/batch" in sent  # refused, then each job sent alone


def test_enqueues_one_after_another_are_sent_alone(real_server: RealServer) -> None:
    transport = FirstHeldBack()
    transport.gate.set()
    with Client(real_server.url, real_server.keys["shop"], transport=transport) as client:
        client.enqueue("noop", {"n": 1})
        client.enqueue("noop", {"n": 2})
    assert transport.paths() == ["POST /jobs", "POST /jobs"]


def test_an_enqueue_naming_items_of_its_own_batch_is_never_sent_in_another(
    real_server: RealServer,
) -> None:
    transport = FirstHeldBack()
    transport.gate.set()
    client = Client(real_server.url, real_server.keys["shop"], transport=transport)
    with closing(client), pytest.raises(QueueError) as refused:
        client.enqueue("noop", {"n": 1}, depends_on_items=[0])
    assert refused.value.status == 422  # as the single route answers it
    assert transport.paths() == ["POST /jobs"]
