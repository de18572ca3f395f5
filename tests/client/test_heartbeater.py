"""The Worker's heartbeater against a real server whose heartbeats answer slowly: a
job's heartbeat is not queued again while one is on its way, and a job released, or a
run finishing, sends no heartbeat still queued."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

from queuelog.client import Client
from queuelog.client.heartbeater import SENDERS, Heartbeater
from queuelog.client.running import Running
from queuelog.client.transport import Answer
from tests.client.pools import Noting, Sent
from tests.client.test_worker import DEADLINE
from tests.realserver import RealServer, wait_until


class SlowBeats(Noting):
    """Each heartbeat takes half a second before it is sent."""

    def forward(self, sent: Sent, send: Callable[[], Answer]) -> Answer:
        if sent.path.endswith("/heartbeat"):
            time.sleep(0.5)
        return send()

    def beats(self) -> list[str]:
        return [path for path in self.paths() if path.endswith("/heartbeat")]


def held_by_a_heartbeater(
    server: RealServer, count: int, transport: SlowBeats, then: Callable[[], None]
) -> Counter[str]:
    """``count`` jobs claimed and held, all due at once, by a heartbeater sending through
    ``transport``; once ``then`` returns they are released and the heartbeater finishes.
    How many heartbeats went out for each job."""
    with Client(server.url, server.keys["shop"]) as shop:
        shop.enqueue_many([{"type": "noop", "payload": {}}] * count)
    with Client(server.url, server.keys["mailer"], transport=transport) as mailer:
        held = [Running(job, 30.0) for job in mailer.claim(types=["noop"], limit=count)]
        assert len(held) == count
        leases = Heartbeater(mailer)
        for running in held:
            running.next_beat = 0.0
            leases.hold(running)
        leases.start()
        then()
        for running in held:
            leases.release(running)
        leases.finish(timeout=DEADLINE)
        sent = Counter(transport.beats())
        for running in held:
            mailer.complete(running.job)
    return sent


def test_a_job_s_heartbeat_is_not_queued_again_while_one_is_on_its_way(
    real_server: RealServer,
) -> None:
    # Two slow heartbeats and idle senders: each tick finds the two jobs due until their
    # answers come; queued again, idle senders would send them again.
    sent = held_by_a_heartbeater(real_server, 2, SlowBeats(), lambda: time.sleep(1.5))
    assert sorted(sent.values()) == [1, 1], sent


def test_heartbeats_queued_for_jobs_since_released_are_not_sent(
    real_server: RealServer,
) -> None:
    transport = SlowBeats()

    def senders_busy() -> None:
        wait_until(lambda: len(transport.beats()) >= SENDERS, "the senders busy")

    sent = held_by_a_heartbeater(real_server, 5 * SENDERS, transport, senders_busy)
    # Those on their way when released, and a few taken meanwhile: not the other 30.
    assert sum(sent.values()) <= 2 * SENDERS, sent
