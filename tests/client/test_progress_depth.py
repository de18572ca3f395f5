"""``job.report_progress`` refuses at once what the server would refuse with the next
heartbeat: progress nested deeper than the server reads is a ValueError in the handler,
as its docstring says, not a report silently dropped."""

from __future__ import annotations

import threading
from typing import Any

from queuelog.client import Client, Job, Worker
from queuelog.plain_json import MAX_JSON_DEPTH
from tests.client.test_worker import DEADLINE, running, wait_until
from tests.realserver import RealServer


def _nested(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(levels - 1):
        value = {"a": value}
    return value


DEEPEST = _nested(MAX_JSON_DEPTH - 1)
REPORTED = {"by_status": {404: 3}, "pair": (1, 2), "deep": DEEPEST}


def test_hardening_89_progress_nested_deeper_than_the_server_reads_is_refused_in_the_handler(
    server: RealServer,
) -> None:
    worker = Worker(concurrency=1, wait_seconds=1)
    refused: list[bool] = []
    release = threading.Event()

    @worker.handler("noop")
    def handle(job: Job) -> Any:
        # Too deep (the second past Python's own stack), or keys JSON writes alike.
        for progress in (_nested(MAX_JSON_DEPTH + 1), _nested(5000), {1: "a", "1": "b"}):
            try:
                job.report_progress(progress)
                refused.append(False)
            except ValueError:
                refused.append(True)
        # As deep as the server reads; what JSON writes its own way (a number as a key, a
        # tuple) is reported as it travels.
        job.report_progress(REPORTED)
        release.wait(DEADLINE)
        return None

    with Client(server.url, server.keys["shop"]) as shop, running(worker, server):
        job = shop.enqueue("noop")
        wait_until(lambda: shop.get(job).progress is not None, "the progress reported")
        release.set()
        done = shop.wait(job, timeout=DEADLINE)
    assert refused == [True, True, True]
    assert done.progress == {"by_status": {"404": 3}, "pair": [1, 2], "deep": DEEPEST}
