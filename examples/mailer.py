"""An example worker: "sends" e-mails, with some failures, to show retries and leases.

Run it with ``queuelog worker examples.mailer:worker`` from the repository root.

A job's payload says what to do; besides ``to`` it may script the job's fate:

- ``fail_attempts``: fail the first N attempts (retried with the type's backoff);
- ``permanent``: fail for good at once (no retries);
- ``seconds``: take this long (heartbeats keep the lease alive meanwhile);
- ``retry_after``: with ``fail_attempts``, ask for the next attempt this many seconds later.

Unscripted jobs fail at random with probability ``$MAILER_FAILURE_RATE`` (default 0.1).
If ``$MAILER_OUTBOX`` names a file, every e-mail "sent" appends a line to it.
"""

from __future__ import annotations

import logging
import os
import random
import time
from typing import Any

from queuelog import Fail, Job, Retry, Worker

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")

worker = Worker(concurrency=8, wait_seconds=5, instance=f"mailer-{os.getpid()}")


@worker.handler("send_email")
def send_email(job: Job) -> dict[str, Any]:
    payload = job.payload
    time.sleep(float(payload.get("seconds", 0.01)))
    if payload.get("permanent"):
        raise Fail(f"mailbox {payload['to']} does not exist")
    if job.retry_count < int(payload.get("fail_attempts", 0)):
        after = payload.get("retry_after")
        raise Retry("SMTP server busy", after=float(after) if after is not None else None)
    if "fail_attempts" not in payload and random.random() < _failure_rate():
        raise ConnectionError("SMTP connection reset")
    _deliver(job)
    return {"sent_to": payload["to"], "attempts": job.retry_count + 1}


def _deliver(job: Job) -> None:
    outbox = os.environ.get("MAILER_OUTBOX")
    if outbox:
        with open(outbox, "a", encoding="utf-8") as fh:
            fh.write(f"{job.id} {job.payload['to']}\n")


def _failure_rate() -> float:
    return float(os.environ.get("MAILER_FAILURE_RATE", "0.1"))
