"""The Worker's heartbeats against a real server whose heartbeats travel slowly: a job's
heartbeat is not sent again while one is on its way, and no heartbeat still queued goes
out for a job whose outcome has reached the server."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

from queuelog.client import Job, Worker
from queuelog.client.heartbeater import SENDERS
from queuelog.client.transport import Answer
from queuelog.models import JobStatus
from tests.client.pools import Noting, Sent
from tests.client.test_worker_outage import enqueued, running, settle
from tests.realserver import RealServer

LEASE_SECONDS = 3  # a heartbeat falls due a second after the claim


class SlowBeats(Noting):
    """Each heartbeat waits ``before`` seconds to be sent, and its answer ``after``."""

    def __init__(self, before: float = 0.0, after: float = 0.0) -> None:
        super().__init__()
        self.before, self.after = before, after

    def forward(self, sent: Sent, send: Callable[[], Answer]) -> Answer:
        if not sent.path.endswith("/heartbeat"):
            return send()
        time.sleep(self.before)
        answered = send()
        time.sleep(self.after)
        return answered

    def beats(self) -> Counter[str]:
        return Counter(path for path in self.paths() if path.endswith("/heartbeat"))


def beats_while_running(
    server: RealServer, count: int, seconds: float, transport: SlowBeats
) -> Counter[str]:
    """``count`` jobs run for ``seconds`` each at once by one worker whose heartbeats go
    through ``transport``; how many heartbeats went out for each job."""
    ids = enqueued(server, "noop", count)
    worker = Worker(concurrency=count, wait_seconds=1, linger_ms=0, lease_seconds=LEASE_SECONDS)

    @worker.handler("noop")
    def handle(job: Job) -> None:
        time.sleep(seconds)

    with running(worker, server, transport, server.url):
        settle(server, ids, JobStatus.COMPLETED)
    return transport.beats()


def test_a_job_s_heartbeat_is_not_sent_again_while_one_is_on_its_way(
    real_server: RealServer,
) -> None:
    # Each job's first heartbeat renews its lease at once but is answered two seconds
    # later, after the job ended: until then the job is due at every look, and queued
    # again, idle senders would send it again.
    sent = beats_while_running(real_server, 2, 2.5, SlowBeats(after=2.0))
    assert sorted(sent.values()) == [1, 1], sent


def test_heartbeats_queued_for_jobs_whose_outcome_arrived_are_not_sent(
    real_server: RealServer,
) -> None:
    # Every job's heartbeat falls due at once; the senders take a few, each held back two
    # seconds, while the jobs end and are acknowledged: the rest stay unsent.
    sent = beats_while_running(real_server, 5 * SENDERS, 1.1, SlowBeats(before=2.0))
    assert sum(sent.values()) <= 2 * SENDERS, sent
