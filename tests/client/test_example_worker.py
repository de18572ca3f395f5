"""The example worker, run as ``queuelog worker examples.mailer:worker`` against a real server."""

from __future__ import annotations

import signal
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

from queuelog.client import Client
from queuelog.models import JobStatus
from tests.realserver import QUEUELOG, ROOT, RealServer

DEADLINE = 180.0


def start_worker(server: RealServer, outbox: Path, *args: str) -> subprocess.Popen[bytes]:
    env = server.client_env(server.keys["mailer"])
    env["MAILER_FAILURE_RATE"] = "0"  # only the scripted failures
    env["MAILER_OUTBOX"] = str(outbox)
    log = open(outbox.with_suffix(".log"), "ab")  # noqa: SIM115 - lives with the process
    process = subprocess.Popen(
        [QUEUELOG, "worker", "examples.mailer:worker", *args],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    log.close()
    return process


def statuses(server: RealServer) -> Counter[str]:
    with Client(server.url, server.keys["root"]) as root:
        return Counter(job.status.value for job in root.list(page_size=500))


def wait_for(server: RealServer, worker: subprocess.Popen[bytes], done: Any) -> Counter[str]:
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        assert worker.poll() is None, "the worker exited early"
        counts = statuses(server)
        if done(counts):
            return counts
        time.sleep(0.5)
    raise AssertionError(f"timed out; statuses: {statuses(server)}")


def stop(worker: subprocess.Popen[bytes]) -> int:
    worker.send_signal(signal.SIGTERM)
    try:
        return worker.wait(timeout=DEADLINE)
    except subprocess.TimeoutExpired:
        worker.kill()
        raise


def script(i: int) -> dict[str, Any]:
    """Job i's fate: every 7th fails for good, every 5th fails twice first, the rest succeed."""
    payload: dict[str, Any] = {"to": f"user{i}@example.com"}
    if i % 7 == 0:
        payload["permanent"] = True
    elif i % 5 == 0:
        payload["fail_attempts"] = 2
        payload["retry_after"] = 0.1
    return payload


def test_example_worker_drains_200_jobs_each_ending_as_scripted(
    server: RealServer, tmp_path: Path
) -> None:
    with Client(server.url, server.keys["shop"]) as shop:
        made = shop.enqueue_many([{"type": "send_email", "payload": script(i)} for i in range(200)])
    ids = [m.job.id for m in made]
    outbox = tmp_path / "outbox.txt"
    worker = start_worker(server, outbox, "--concurrency", "8", "--prefetch", "8")
    try:
        wait_for(server, worker, lambda c: c["completed"] + c["failed"] == 200)
    finally:
        assert stop(worker) == 0
    with Client(server.url, server.keys["root"]) as root:
        jobs = [root.get(job_id) for job_id in ids]
    for i, job in enumerate(jobs):
        if i % 7 == 0:
            assert (job.status, job.retry_count, job.error) == (
                JobStatus.FAILED, 0, f"mailbox user{i}@example.com does not exist"
            )  # fmt: skip
        else:
            attempts = 3 if i % 5 == 0 else 1
            assert job.status is JobStatus.COMPLETED, (i, job)
            assert job.result == {"sent_to": f"user{i}@example.com", "attempts": attempts}
    sent = Counter(line.split()[0] for line in outbox.read_text().splitlines())
    assert set(sent.values()) == {1}  # every e-mail sent exactly once
    assert len(sent) == sum(1 for i in range(200) if i % 7)


def test_sigterm_during_work_loses_nothing_and_duplicates_nothing(
    server: RealServer, tmp_path: Path
) -> None:
    total = 40
    with Client(server.url, server.keys["shop"]) as shop:
        jobs = [
            {"type": "send_email", "payload": {"to": f"u{i}@x", "seconds": 0.3}}
            for i in range(total)
        ]
        shop.enqueue_many(jobs)
    outbox = tmp_path / "outbox.txt"
    # The first worker holds jobs ahead of its handlers: stopping it runs them too.
    first = start_worker(server, outbox, "--concurrency", "4", "--prefetch", "4")
    try:
        wait_for(server, first, lambda c: c["completed"] >= 8)
    finally:
        assert stop(first) == 0  # running jobs were finished, then it exited
    after_first = statuses(server)
    assert after_first["running"] == 0 and after_first["completed"] < total
    second = start_worker(server, outbox, "--concurrency", "4")
    try:
        wait_for(server, second, lambda c: c["completed"] == total)
    finally:
        assert stop(second) == 0
    sent = Counter(line.split()[0] for line in outbox.read_text().splitlines())
    assert len(sent) == total and set(sent.values()) == {1}
    with Client(server.url, server.keys["root"]) as root:
        for job in root.list(page_size=100):
            assert job.retry_count == 0  # nobody's lease expired, no attempt was repeated
            assert [e.event for e in root.events(job.id)] == ["enqueued", "claimed", "completed"]


def test_a_second_sigint_stops_at_once_and_hands_the_running_job_back(
    server: RealServer, tmp_path: Path
) -> None:
    with Client(server.url, server.keys["shop"]) as shop:
        job = shop.enqueue("send_email", {"to": "slow@x", "seconds": 600})
    worker = start_worker(server, tmp_path / "outbox.txt")
    try:
        wait_for(server, worker, lambda c: c["running"] == 1)
        worker.send_signal(signal.SIGINT)  # waits for the job (up to 30 s)...
        time.sleep(0.5)
        worker.send_signal(signal.SIGINT)  # ...unless told twice
        assert worker.wait(timeout=DEADLINE) == 0
    finally:
        if worker.poll() is None:
            worker.kill()
    with Client(server.url, server.keys["root"]) as root:
        after = root.get(job.id)
        events = [e.event for e in root.events(job.id)]
    # Handed back as a failed attempt. The worker's long poll, still out when the job went
    # pending again, may have taken it and given it straight back, its attempt unspent.
    assert events[:3] == ["enqueued", "claimed", "retry_scheduled"], events
    assert events[3:] in ([], ["claimed", "released"]), events
    assert after.status is JobStatus.PENDING and after.retry_count == 1
    assert after.error == "worker stopped before the job finished"
