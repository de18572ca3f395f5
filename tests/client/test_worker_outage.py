"""A worker's outcomes against a server that is away for longer than one send's retries
(they reach it once it is back, and no job runs twice), or that has them already."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from queuelog.client import Client, Fail, Job, Snooze, Worker
from queuelog.client.policy import RetryPolicy
from queuelog.client.running import LATE_SECONDS
from queuelog.client.transport import Answer, Broken, NotSent
from queuelog.models import JobStatus
from tests.client.pools import Noting, Sent, answer
from tests.client.test_worker import DEADLINE, admin
from tests.realserver import RealServer, wait_until
from tests.tcpproxy import TcpProxy

# Longer than the worker's client tries one send for (its retry policy's pauses).
AWAY_SECONDS = 2.0
OUTCOME_PATHS = ("/jobs/batch/complete", "/fail", "/release")


def outcome_sends(transport: Noting) -> int:
    """How many requests carrying an outcome ``transport`` has sent (or tried to)."""
    return sum(1 for s in transport.sent if s.path.endswith(OUTCOME_PATHS))


@contextmanager
def running(
    worker: Worker, server: RealServer, transport: Noting, url: str, attempts: int = 3
) -> Iterator[None]:
    """``worker`` running with a client that reaches ``server`` at ``url``, trying each
    send ``attempts`` times."""
    policy = RetryPolicy(attempts=attempts, base_delay=0.1, max_delay=0.3)
    key = server.keys["mailer"]
    client = Client(url, key, retry_policy=policy, transport=transport)
    thread = threading.Thread(target=worker.run, args=(client,), daemon=True)
    thread.start()
    try:
        yield
    finally:
        worker.stop()
        thread.join(timeout=DEADLINE)
        client.close()
    assert not thread.is_alive(), "the worker did not stop"


def enqueued(server: RealServer, job_type: str, count: int) -> list[int]:
    with Client(server.url, server.keys["shop"]) as shop:
        payload = {"to": "a@example.com"}
        return [shop.enqueue(job_type, payload).id for _ in range(count)]


def histories(server: RealServer, ids: list[int]) -> list[list[str]]:
    with admin(server) as root:
        return [[e.event for e in root.events(i)] for i in ids]


def settle(server: RealServer, ids: list[int], status: JobStatus) -> None:
    with admin(server) as root:

        def ended() -> bool:
            return all(root.get(i).status is status for i in ids)

        wait_until(ended, f"the jobs to be {status}")


@pytest.mark.parametrize(
    ("outcome", "status"),
    [
        ("complete", JobStatus.COMPLETED),
        ("fail", JobStatus.FAILED),
        ("snooze", JobStatus.PENDING),
    ],
)
def test_an_outcome_the_server_was_away_for_reaches_it_once_it_is_back(
    server: RealServer, outcome: str, status: JobStatus
) -> None:
    worker = Worker(concurrency=3, wait_seconds=1, linger_ms=0)
    finish = threading.Event()
    runs: list[int] = []

    @worker.handler("send_email")  # a 30 s lease: it does not run out while away
    def handle(job: Job) -> dict[str, bool]:
        runs.append(job.id)
        finish.wait(DEADLINE)
        if outcome == "fail":
            raise Fail("no such mailbox")
        if outcome == "snooze":
            raise Snooze(3600)
        return {"sent": True}

    ids = enqueued(server, "send_email", 3)
    proxy, transport = TcpProxy(("127.0.0.1", server.port)), Noting()
    with running(worker, server, transport, f"http://127.0.0.1:{proxy.port}"):
        wait_until(lambda: sorted(runs) == ids, "the jobs to start")
        proxy.cut()
        finish.set()  # they finish while the server cannot be reached
        time.sleep(AWAY_SECONDS)
        refused = outcome_sends(transport)
        proxy.restore()
        settle(server, ids, status)
    proxy.close()
    assert refused > 3, "no outcome was sent again while the server was away"
    assert sorted(runs) == ids  # each ran once
    for events in histories(server, ids):
        assert "lease_expired" not in events and events.count("claimed") == 1, events


def test_more_outcomes_than_one_acknowledgement_takes_reach_the_server_once_it_is_back(
    server: RealServer,
) -> None:
    """Completions sent again join those finished meanwhile: more than the server takes in
    one acknowledgement (100), which refused them all (422), so their jobs ran again."""
    count = 150
    worker = Worker(concurrency=count, wait_seconds=1, linger_ms=0)
    finish = threading.Event()
    runs: list[int] = []
    ended: list[int] = []

    @worker.handler("send_email")  # a 30 s lease: it does not run out while away
    def handle(job: Job) -> None:
        runs.append(job.id)
        finish.wait(DEADLINE)
        ended.append(job.id)

    with Client(server.url, server.keys["shop"]) as shop:
        made = shop.enqueue_many([{"type": "send_email", "payload": {"to": "a@b.c"}}] * count)
    ids = sorted(e.job.id for e in made)
    proxy, transport = TcpProxy(("127.0.0.1", server.port)), Noting()
    with running(worker, server, transport, f"http://127.0.0.1:{proxy.port}"):
        wait_until(lambda: sorted(runs) == ids, "the jobs to start")
        proxy.cut()
        finish.set()
        wait_until(lambda: len(ended) == count, "the handlers to return")
        tried = outcome_sends(transport)
        # Two sends' worth of tries since the last handler returned: one held them all.
        wait_until(lambda: outcome_sends(transport) >= tried + 6, "the outcomes to be tried")
        proxy.restore()
        settle(server, ids, JobStatus.COMPLETED)
    proxy.close()
    assert sorted(runs) == ids  # each ran once
    for events in histories(server, ids):
        assert "lease_expired" not in events and events.count("claimed") == 1, events


class FirstBeatAnsweredLate(Noting):
    """Holds back the answer to the first heartbeat (the server has it) for ``seconds``."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds
        self.held = threading.Lock()
        self.late = False

    def forward(self, sent: Sent, send: Callable[[], Answer]) -> Answer:
        got = send()
        with self.held:
            first = sent.path.endswith("/heartbeat") and not self.late
            self.late = self.late or first
        if first:
            time.sleep(self.seconds)
        return got


def test_a_heartbeat_answered_late_holds_up_no_other_job_s_lease(server: RealServer) -> None:
    # A 3 s lease, renewed every second, and handlers that run past it: the others'
    # heartbeats went after the late one's answer (5 s), and their leases ran out.
    worker = Worker(concurrency=4, wait_seconds=1, linger_ms=0, lease_seconds=3)
    worker.handler("noop")(lambda job: time.sleep(4.5))
    ids = enqueued(server, "noop", 4)
    with running(worker, server, FirstBeatAnsweredLate(5.0), server.url):
        settle(server, ids, JobStatus.COMPLETED)
    expired = [events for events in histories(server, ids) if "lease_expired" in events]
    # The late one's own lease may run out: its next heartbeat waits for that answer.
    assert len(expired) <= 1, expired


class Refusing(Noting):
    """Answers every request carrying an outcome ``status`` (503, 429) ``times`` times."""

    def __init__(self, status: int, times: int) -> None:
        super().__init__()
        self.status, self.left = status, times

    def forward(self, sent: Sent, send: Callable[[], Answer]) -> Answer:
        if sent.path.endswith(OUTCOME_PATHS) and self.left > 0:
            self.left -= 1
            problem = {"type": "unavailable", "status": self.status, "detail": "not now"}
            return answer(self.status, problem, {"Retry-After": "0"})
        return send()


@pytest.mark.parametrize("status", [503, 429])
def test_an_outcome_refused_for_now_more_often_than_one_send_retries_is_sent_again(
    server: RealServer, status: int
) -> None:
    worker = Worker(concurrency=1, wait_seconds=1, linger_ms=0, lease_seconds=3)
    runs: list[int] = []
    worker.handler("noop")(lambda job: runs.append(job.id))
    (job_id,) = enqueued(server, "noop", 1)
    transport = Refusing(status, times=6)  # two sends' worth of the policy's 3 tries
    with running(worker, server, transport, server.url):
        settle(server, [job_id], JobStatus.COMPLETED)
    assert transport.left == 0 and runs == [job_id]
    (events,) = histories(server, [job_id])
    assert "lease_expired" not in events, events


class AwayThenHeld(Noting):
    """Refuses every request while ``away``; then holds an outcome's request for ``job``
    until a claim has handed the job out again (its lease ran out meanwhile)."""

    def __init__(self) -> None:
        super().__init__()
        self.away = threading.Event()
        self.reclaimed = threading.Event()
        self.job = 0

    def forward(self, sent: Sent, send: Callable[[], Answer]) -> Answer:
        if self.away.is_set():
            raise NotSent("the server is away")
        if sent.path.endswith(OUTCOME_PATHS) and not self.reclaimed.is_set():
            self.reclaimed.wait(DEADLINE)
        got = send()
        if sent.path == "/jobs/claim" and f'"id":{self.job},' in got.body.decode():
            self.reclaimed.set()
        return got


def test_an_outcome_sent_after_its_job_was_claimed_again_leaves_the_new_claim_its_lease(
    server: RealServer,
) -> None:
    # A 2 s lease, renewed every 0.67 s: the second run needs its heartbeats.
    worker = Worker(concurrency=2, wait_seconds=1, linger_ms=0, lease_seconds=2)
    runs: list[int] = []
    transport = AwayThenHeld()

    @worker.handler("noop")  # 2 retries, a short backoff
    def handle(job: Job) -> None:
        runs.append(job.id)
        if len(runs) == 1:
            transport.away.set()  # its outcome cannot be sent; its lease runs out
        else:
            time.sleep(4)

    (transport.job,) = enqueued(server, "noop", 1)
    with running(worker, server, transport, server.url):
        wait_until(lambda: bool(runs), "the first run")
        with admin(server) as root:
            wait_until(lambda: root.get(transport.job).status is JobStatus.PENDING, "expiry")
        transport.away.clear()
        settle(server, [transport.job], JobStatus.COMPLETED)
    (events,) = histories(server, [transport.job])
    assert events.count("lease_expired") == 1 and events.count("claimed") == 2, events


def finishing_when_away(
    shutdown_seconds: float,
) -> tuple[Worker, threading.Event, threading.Event]:
    """A worker whose handler says it ``started`` a job, then finishes it once ``away``
    is set (by the test, once the server cannot be reached)."""
    worker = Worker(concurrency=1, wait_seconds=1, linger_ms=0, shutdown_seconds=shutdown_seconds)
    started, away = threading.Event(), threading.Event()

    @worker.handler("send_email")
    def handle(job: Job) -> None:
        started.set()
        away.wait(DEADLINE)

    return worker, started, away


def test_a_worker_stopped_while_its_server_is_away_sends_its_outcomes_until_its_deadline(
    server: RealServer,
) -> None:
    worker, started, away = finishing_when_away(shutdown_seconds=DEADLINE)
    ids = enqueued(server, "send_email", 1)
    proxy = TcpProxy(("127.0.0.1", server.port))
    with running(worker, server, Noting(), f"http://127.0.0.1:{proxy.port}"):
        assert started.wait(DEADLINE)
        proxy.cut()
        away.set()
        stopping = threading.Timer(AWAY_SECONDS, proxy.restore)
        stopping.start()
        worker.stop()  # the outcome is still to be sent: the run waits for it
    stopping.join()
    proxy.close()
    with admin(server) as root:
        assert root.get(ids[0]).status is JobStatus.COMPLETED


def test_a_worker_whose_server_stays_away_stops_at_its_deadline(
    server: RealServer, caplog: pytest.LogCaptureFixture
) -> None:
    worker, started, away = finishing_when_away(shutdown_seconds=1)
    ids = enqueued(server, "send_email", 1)
    proxy = TcpProxy(("127.0.0.1", server.port))
    url = f"http://127.0.0.1:{proxy.port}"
    with caplog.at_level("ERROR", logger="queuelog.worker"), running(worker, server, Noting(), url):
        assert started.wait(DEADLINE)
        proxy.cut()
        away.set()
        time.sleep(AWAY_SECONDS)
    proxy.close()
    # ``running`` stopped the worker (it did not wait for the server for ever), which
    # said what it could not report.
    assert any("outcome=unreported" in r.getMessage() for r in caplog.records), caplog.text
    with admin(server) as root:
        assert root.get(ids[0]).status is JobStatus.RUNNING  # until its lease runs out


class Unanswered(Noting):
    """Once ``hung`` is set, holds every request until ``answering`` is: a server that
    takes requests and never answers (no timeout of the client's runs out)."""

    def __init__(self) -> None:
        super().__init__()
        self.hung, self.answering = threading.Event(), threading.Event()

    def forward(self, sent: Sent, send: Callable[[], Answer]) -> Answer:
        if self.hung.is_set():
            self.answering.wait(DEADLINE)
        return send()

    def holds(self, since: int, *endings: str) -> bool:
        """Whether requests sent since the ``since``-th include one to a path with each
        of ``endings``."""
        with self._lock:
            paths = [s.path for s in self.sent[since:]]
        return all(any(path.endswith(end) for path in paths) for end in endings)


def test_a_worker_stopped_while_every_request_hangs_returns_within_one_late_period(
    server: RealServer,
) -> None:
    # A heartbeat, an outcome and a claim each waited on the server, and the wind-down
    # gave each of them, then the running jobs' late reports, a late period of its own.
    worker = Worker(concurrency=3, wait_seconds=4, lease_seconds=3, shutdown_seconds=0.5)
    started, finishing = threading.Barrier(4, timeout=DEADLINE), threading.Event()
    transport = Unanswered()

    @worker.handler("noop")
    def handle(job: Job) -> None:
        started.wait()
        # Two run past the deadline; one ends while the server hangs.
        (transport.answering if job.payload["long"] else finishing).wait(DEADLINE)

    with Client(server.url, server.keys["shop"]) as shop:
        shop.enqueue_many([{"type": "noop", "payload": {"long": i < 2}} for i in range(3)])
    client = Client(server.url, server.keys["mailer"], transport=transport)
    thread = threading.Thread(target=worker.run, args=(client,), daemon=True)
    thread.start()
    try:
        started.wait()
        since = len(transport.sent)
        transport.hung.set()
        finishing.set()  # one job ends: its completion, then a claim, wait on the server
        wait_until(
            lambda: transport.holds(since, "/heartbeat", "/jobs/batch/complete", "/jobs/claim"),
            "a heartbeat, an outcome and a claim to wait on the server",
        )
        began = time.monotonic()
        worker.stop()
        thread.join(timeout=DEADLINE)
        took = time.monotonic() - began
    finally:
        transport.answering.set()
        client.close()
    assert not thread.is_alive()
    # The deadline, then one late period: the claim's long poll ended meanwhile.
    assert took < 0.5 + LATE_SECONDS + 2.5, took


def test_outcomes_queued_behind_a_completion_never_answered_are_said_unreported_too(
    server: RealServer, caplog: pytest.LogCaptureFixture
) -> None:
    # Only the completion on the wire was said unreported; the one queued behind it was
    # never mentioned.
    worker = Worker(concurrency=2, wait_seconds=1, shutdown_seconds=0.5)
    transport, ended = Unanswered(), []

    @worker.handler("noop")
    def handle(job: Job) -> None:
        if job.payload["first"]:
            transport.hung.set()  # its completion now waits on a server that hangs
        else:  # ends once that completion is on its way: queued behind it
            wait_until(lambda: transport.holds(0, "/jobs/batch/complete"), "the completion")
        ended.append(job.id)

    with Client(server.url, server.keys["shop"]) as shop:
        made = shop.enqueue_many([{"type": "noop", "payload": {"first": i == 0}} for i in (0, 1)])
    client = Client(server.url, server.keys["mailer"], transport=transport)
    thread = threading.Thread(target=worker.run, args=(client,), daemon=True)
    thread.start()
    try:
        wait_until(lambda: len(ended) == 2, "both jobs to end")
        worker.stop()
        thread.join(timeout=DEADLINE)
    finally:
        transport.answering.set()
        client.close()
    assert not thread.is_alive()
    for job in (one.job for one in made):
        said = [r.getMessage() for r in caplog.records if f"job_id={job.id} " in r.getMessage()]
        assert any("outcome=unreported" in line for line in said), (job.id, said)


class RefusedThenUnanswered(Unanswered):
    """Answers the first ``times`` failures sent 503, then holds every request."""

    def __init__(self, times: int) -> None:
        super().__init__()
        self.left = times

    def forward(self, sent: Sent, send: Callable[[], Answer]) -> Answer:
        if sent.path.endswith("/fail") and self.left > 0:
            self.left -= 1
            if not self.left:
                self.hung.set()
            return answer(503, {"type": "unavailable", "status": 503, "detail": "not now"})
        return super().forward(sent, send)


def test_outcomes_an_unanswered_resend_holds_up_are_said_unreported_too(
    server: RealServer, caplog: pytest.LogCaptureFixture
) -> None:
    # A failure sent again by the acknowledger, and a completion gathered with it, were
    # neither in flight as a completion nor queued: said nothing of.
    worker = Worker(concurrency=2, wait_seconds=1, shutdown_seconds=0.5)
    transport = RefusedThenUnanswered(times=6)  # the handler's 3 tries, then the resend's

    @worker.handler("noop")
    def handle(job: Job) -> None:
        if job.payload["first"]:
            raise Fail("no such mailbox")
        # Ends in the pause before the failure is sent again: sent along with it.
        wait_until(lambda: transport.left == 0, "the failure to be refused six times")

    with Client(server.url, server.keys["shop"]) as shop:
        made = shop.enqueue_many([{"type": "noop", "payload": {"first": i == 0}} for i in (0, 1)])
    try:
        with running(worker, server, transport, server.url):
            fails = lambda: sum(1 for s in transport.sent if s.path.endswith("/fail"))  # noqa: E731
            wait_until(lambda: fails() == 7, "the failure sent again, held")
    finally:
        transport.answering.set()
    for job in (one.job for one in made):
        said = [r.getMessage() for r in caplog.records if f"job_id={job.id} " in r.getMessage()]
        assert any("outcome=unreported" in line for line in said), (job.id, said)


class HeartbeatAfterCompletion(Noting):
    """Holds the answer to a completion until a heartbeat has gone out after it."""

    def __init__(self) -> None:
        super().__init__()
        self.completed = threading.Event()
        self.beaten = threading.Event()

    def forward(self, sent: Sent, send: Callable[[], Answer]) -> Answer:
        if sent.path == "/jobs/batch/complete":
            got = send()
            self.completed.set()  # the server has it
            self.beaten.wait(DEADLINE)
            return got
        was_completed = self.completed.is_set()
        got = send()
        if sent.path.endswith("/heartbeat") and was_completed:
            self.beaten.set()
        return got


def test_a_heartbeat_that_meets_its_jobs_own_completion_warns_of_no_lost_lease(
    server: RealServer, caplog: pytest.LogCaptureFixture
) -> None:
    worker = Worker(concurrency=1, wait_seconds=1, linger_ms=0)
    worker.handler("slow")(lambda job: None)  # a 2 s lease: a heartbeat every 0.67 s
    transport = HeartbeatAfterCompletion()
    ids = enqueued(server, "slow", 1)
    with caplog.at_level("INFO", logger="queuelog.worker"):
        with running(worker, server, transport, server.url):
            assert transport.beaten.wait(DEADLINE), "no heartbeat met the completion"
            settle(server, ids, JobStatus.COMPLETED)
            wait_until(lambda: "outcome=completed" in caplog.text, "the completion's line")
        heartbeats = [s for s in transport.sent if s.path.endswith("/heartbeat")]
    assert heartbeats, "no heartbeat was sent"
    assert "lost its lease" not in caplog.text, caplog.text


class LosesTheFirstAnswer(Noting):
    """Sends the first outcome and loses its answer (a restart); then refuses the next
    ``refusals`` outcomes unsent, so that the client's own tries run out and the worker
    sends the outcome again later, as a new call."""

    def __init__(self, refusals: int) -> None:
        super().__init__()
        self.refusals = refusals

    def forward(self, sent: Sent, send: Callable[[], Answer]) -> Answer:
        if not sent.path.endswith(OUTCOME_PATHS):
            return send()
        tries = outcome_sends(self)
        if tries == 1:
            send()
            raise Broken("the connection closed before the answer")
        if tries <= 1 + self.refusals:
            raise NotSent("the server is restarting")
        return send()


@pytest.mark.parametrize(
    ("outcome", "status", "said"),
    [
        ("complete", JobStatus.COMPLETED, "completed"),
        ("fail", JobStatus.FAILED, "failed"),
        ("snooze", JobStatus.PENDING, "snoozed"),
    ],
)
@pytest.mark.parametrize(
    ("refusals", "attempts"),
    [
        (0, 3),  # sent again by the client
        (3, 3),  # by the worker, the client's last try refused unsent
        (0, 1),  # by the worker, the client's only try the one whose answer was lost
    ],
)
def test_an_outcome_whose_answer_was_lost_is_said_unconfirmed_not_lost(
    server: RealServer,
    caplog: pytest.LogCaptureFixture,
    outcome: str,
    status: JobStatus,
    said: str,
    refusals: int,
    attempts: int,
) -> None:
    caplog.set_level(logging.INFO, logger="queuelog.worker")
    worker = Worker(concurrency=1, wait_seconds=1, linger_ms=0)

    @worker.handler("noop")
    def handle(job: Job) -> None:
        if outcome == "fail":
            raise Fail("no such mailbox")
        if outcome == "snooze":
            raise Snooze(3600)

    (job_id,) = enqueued(server, "noop", 1)
    transport = LosesTheFirstAnswer(refusals)
    with running(worker, server, transport, server.url, attempts):
        settle(server, [job_id], status)
        wait_until(lambda: outcome_sends(transport) >= 2 + refusals, "the outcome sent again")
        wait_until(lambda: f"job_id={job_id} " in caplog.text, "its outcome logged")
    lines = [r.getMessage() for r in caplog.records if f"job_id={job_id} " in r.getMessage()]
    assert any(f"outcome={said}, unconfirmed" in line for line in lines), lines
    assert not any("outcome=lost" in line for line in lines), lines
