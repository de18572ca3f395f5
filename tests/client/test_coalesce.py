"""Enqueues made at once by threads of one client travel as one batch, each answered alone."""

from __future__ import annotations

import signal
import threading
import time
import uuid
from collections.abc import Callable
from contextlib import closing
from typing import Any

import pytest

from queuelog.client import Client, Job
from queuelog.client.policy import RetryPolicy
from queuelog.client.transport import Answer
from queuelog.errors import QueueError
from tests.client.pools import Noting, Sent, answer
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


def enqueue_at_once(
    server: RealServer, jobs: list[dict[str, Any]], transport: FirstHeldBack | None = None
) -> tuple[list[Any], list[str]]:
    """Each job enqueued by a thread of its own on one client, the others calling while
    the first one's request is held back; each call's job or error, and the requests."""
    transport = transport or FirstHeldBack()
    policy = RetryPolicy(attempts=2, base_delay=0.01, max_delay=0.02)
    client = Client(server.url, server.keys["shop"], transport=transport, retry_policy=policy)
    answers: list[Any] = [None] * len(jobs)

    def call(i: int) -> None:
        try:
            answers[i] = client.enqueue(**jobs[i])
        except (QueueError, ValueError) as error:
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


def test_a_body_that_is_not_json_is_the_error_of_its_own_call_only(
    real_server: RealServer,
) -> None:
    jobs: list[dict[str, Any]] = [{"type": "noop", "payload": {"n": n}} for n in range(6)]
    jobs[3] = {"type": "noop", "payload": {"n": float("nan")}}
    answers, _ = enqueue_at_once(real_server, jobs)
    assert isinstance(answers[3], ValueError)  # every call of its batch had this error
    assert [a.payload["n"] for i, a in enumerate(answers) if i != 3] == [0, 1, 2, 4, 5]


class AwayAfterTheFirst(FirstHeldBack):
    """Answers every enqueue 503 once the first is let through: a server away for now."""

    def forward(self, sent: Sent, send: Callable[[], Any]) -> Any:
        if sent is self.sent[0]:
            assert self.gate.wait(DEADLINE)
        problem = {"type": "unavailable", "status": 503, "detail": "not now"}
        return answer(503, problem, {"Retry-After": "0"})


def test_a_batch_the_server_cannot_take_for_now_is_each_call_s_error_not_sent_alone(
    real_server: RealServer,
) -> None:
    jobs: list[dict[str, Any]] = [{"type": "noop", "payload": {"n": n}} for n in range(20)]
    answers, sent = enqueue_at_once(real_server, jobs, AwayAfterTheFirst())
    assert all(isinstance(a, QueueError) and a.status == 503 for a in answers), answers
    # The first alone, then the others' batch, each tried twice; not each call alone after
    # (each would have tried as long again, one after another: 38 more requests).
    assert "POST /jobs/batch" in sent and sent.count("POST /jobs") < len(jobs), sent


class BatchAnswerUnread(FirstHeldBack):
    """Stores every batch but answers it with a body that is not JSON."""

    def forward(self, sent: Sent, send: Callable[[], Any]) -> Any:
        got = super().forward(sent, send)
        return Answer(200, b"<html>", None) if sent.path == "/jobs/batch" else got


def test_a_batch_stored_but_its_answer_not_read_answers_each_call_with_its_own_job(
    real_server: RealServer,
) -> None:
    jobs: list[dict[str, Any]] = [{"type": "noop", "payload": {"n": n}} for n in range(8)]
    answers, sent = enqueue_at_once(real_server, jobs, BatchAnswerUnread())
    assert [a.payload["n"] for a in answers] == list(range(8)), answers
    assert len({a.id for a in answers}) == 8 and "POST /jobs/batch" in sent


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


class Interrupted(Exception):
    """What a signal's handler raises in the thread it interrupts (as Ctrl-C does)."""


def _interrupted(_signum: int, _frame: object) -> None:
    raise Interrupted


def test_hardening_48_an_enqueue_interrupted_while_it_waits_leaves_no_call_waiting(
    real_server: RealServer,
) -> None:
    """The main thread's enqueue waits behind one on its way and is interrupted by a
    signal's exception (as Ctrl-C does): the call that queued behind it is answered,
    its own job is not sent, and the client goes on enqueueing."""
    transport = FirstHeldBack()
    client = Client(real_server.url, real_server.keys["shop"], transport=transport)
    answers: list[Any] = []

    def enqueue(n: int, after: float = 0.0) -> threading.Thread:
        def call() -> None:
            time.sleep(after)
            answers.append(client.enqueue("noop", {"n": n}))

        thread = threading.Thread(target=call, daemon=True)
        thread.start()
        return thread

    first = enqueue(1)
    wait_until(lambda: bool(transport.sent), "the first enqueue on its way")
    second = enqueue(3, after=0.2)  # queued behind the main thread's call
    previous = signal.signal(signal.SIGALRM, _interrupted)
    release = threading.Timer(0.6, transport.gate.set)
    release.start()
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.4)
        with pytest.raises(Interrupted):
            client.enqueue("noop", {"n": 2})
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    for thread in (release, first, second):
        thread.join(DEADLINE)
    with closing(client):
        assert not second.is_alive(), "the call behind the interrupted one was never answered"
        assert sorted(job.payload["n"] for job in answers) == [1, 3]
        assert client.enqueue("noop", {"n": 4}).payload == {"n": 4}
        assert transport.paths() == ["POST /jobs"] * 3  # never the interrupted call's job
