"""SIGTERM and SIGINT while workers run in this process (on its main thread, where
signals arrive): every worker stops gracefully, and the handlers the process had still
hear the signal and are put back once the last worker has ended."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from types import FrameType
from typing import Any, cast

import pytest

from queuelog.client import AsyncClient, Client, Job, Worker
from queuelog.models import JobStatus
from tests.client.pools import Noting
from tests.client.test_worker import DEADLINE, admin
from tests.realserver import RealServer, wait_until


def idle_worker() -> Worker:
    worker = Worker(concurrency=1, wait_seconds=1)
    worker.handler("noop")(lambda job: None)
    return worker


def signal_once_taken(signum: int, own: Any, then: threading.Event | None = None) -> None:
    """Send ``signum`` to this process from another thread, once a worker has put its
    handler in place of ``own`` (and ``then`` is set)."""

    def send() -> None:
        if then is not None:
            then.wait(DEADLINE)
        deadline = time.monotonic() + DEADLINE
        while signal.getsignal(signum) is own and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(os.getpid(), signum)

    threading.Thread(target=send, daemon=True).start()


def test_sigterm_stops_run_and_still_reaches_the_handler_the_process_had(
    server: RealServer,
) -> None:
    heard: list[int] = []

    def own(signum: int, _: FrameType | None) -> None:
        heard.append(signum)

    before = signal.signal(signal.SIGTERM, own)
    try:
        signal_once_taken(signal.SIGTERM, own)
        with Client(server.url, server.keys["mailer"]) as client:
            idle_worker().run(client)  # on this, the main thread: returns once stopped
        assert heard == [signal.SIGTERM]
        assert signal.getsignal(signal.SIGTERM) is own
    finally:
        signal.signal(signal.SIGTERM, before)


def test_what_the_process_s_handler_raises_is_raised_once_the_worker_has_wound_down(
    server: RealServer,
) -> None:
    # A handler that exits (sys.exit in it) exited in the middle of the worker's run: its
    # job was left running until its lease ran out.
    def exits(signum: int, _: FrameType | None) -> None:
        raise SystemExit(3)

    worker = Worker(concurrency=1, wait_seconds=1)
    started = threading.Event()

    @worker.handler("noop")
    def handle(job: Job) -> dict[str, Any]:
        started.set()
        time.sleep(1.0)
        return {"finished": True}

    with Client(server.url, server.keys["shop"]) as shop:
        job_id = shop.enqueue("noop").id
    before = signal.signal(signal.SIGTERM, exits)
    try:
        signal_once_taken(signal.SIGTERM, exits, then=started)
        with Client(server.url, server.keys["mailer"]) as client, pytest.raises(SystemExit):
            worker.run(client)
    finally:
        signal.signal(signal.SIGTERM, before)
    with admin(server) as root:  # reported before run ended, as its winding down does
        done = root.get(job_id)
    assert done.status is JobStatus.COMPLETED and done.result == {"finished": True}


def test_sigterm_stops_every_arun_and_leaves_the_loop_s_own_handler(server: RealServer) -> None:
    # arun took the loop's SIGTERM handler for its own (an application's, a server's that
    # hosts the worker), removed it at the end, and a second arun took it from the first.
    async def main() -> list[str]:
        loop = asyncio.get_running_loop()
        heard: list[str] = []
        loop.add_signal_handler(signal.SIGTERM, heard.append, "application")
        try:
            with (
                Client(server.url, server.keys["mailer"]) as one,
                Client(server.url, server.keys["mailer"]) as two,
            ):
                runs = [asyncio.create_task(idle_worker().arun(c)) for c in (one, two)]
                await asyncio.sleep(1.0)
                os.kill(os.getpid(), signal.SIGTERM)
                await asyncio.wait_for(asyncio.gather(*runs), timeout=30)
            assert heard == ["application"]
            os.kill(os.getpid(), signal.SIGTERM)  # the application's handler, still there
            await asyncio.sleep(0.2)
            return heard
        finally:
            loop.remove_signal_handler(signal.SIGTERM)

    assert asyncio.run(main()) == ["application", "application"]


def test_workers_ending_in_another_order_than_they_started_put_back_the_handlers(
    server: RealServer,
) -> None:
    """The second worker to start, ending last, put back the first's handler, which did
    nothing once its worker had ended: the process then ignored SIGTERM and SIGINT."""
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}

    async def main() -> None:
        first, second = idle_worker(), idle_worker()
        with (
            Client(server.url, server.keys["mailer"]) as one,
            Client(server.url, server.keys["mailer"]) as two,
        ):
            runs = [asyncio.create_task(first.arun(one)), asyncio.create_task(second.arun(two))]
            await asyncio.sleep(1.0)
            first.stop()
            await asyncio.wait_for(runs[0], timeout=30)
            second.stop()
            await asyncio.wait_for(runs[1], timeout=30)

    asyncio.run(main())
    assert {s: signal.getsignal(s) for s in before} == before


def test_sigint_under_asyncio_run_stops_arun_which_returns(server: RealServer) -> None:
    # asyncio.run's own SIGINT handler, called in turn, cancelled the program's main task:
    # the worker stopped, and asyncio.run then raised KeyboardInterrupt.
    async def main() -> str:
        with Client(server.url, server.keys["mailer"]) as client:
            signal_once_taken(signal.SIGINT, signal.getsignal(signal.SIGINT))
            await asyncio.wait_for(idle_worker().arun(client), timeout=DEADLINE)
        return "returned"

    try:
        assert asyncio.run(main()) == "returned"
    except KeyboardInterrupt:  # not to the test run: it would end the session
        pytest.fail("arun's SIGINT reached asyncio.run as a KeyboardInterrupt")


def test_a_worker_refuses_an_async_client() -> None:
    async def main() -> None:
        async with AsyncClient("http://127.0.0.1:8000", "ql_x") as client:
            with pytest.raises(TypeError, match="runs on a Client"):
                await idle_worker().arun(cast(Client, client))

    asyncio.run(main())


def test_sigterm_stops_run_while_its_claim_waits_on_a_server_that_does_not_answer(
    server: RealServer,
) -> None:
    # The claim was sent from the main thread, where the signal's handler runs: the
    # worker heard SIGTERM only once the claim timed out, a minute and more later.
    worker = Worker(concurrency=1, wait_seconds=1, shutdown_seconds=1)
    worker.handler("noop")(lambda job: None)
    transport = Noting()
    assert server.process is not None
    pid = server.process.pid
    returned, resumed = threading.Event(), threading.Event()

    def hang_then_signal() -> None:
        wait_until(lambda: "POST /jobs/claim" in transport.paths(), "the first claim")
        os.kill(pid, signal.SIGSTOP)
        time.sleep(1.5)  # longer than the claims' long poll: one waits on the server now
        os.kill(os.getpid(), signal.SIGTERM)
        if not returned.wait(DEADLINE / 3):  # the worker still waits: let its claim end
            resumed.set()
            os.kill(pid, signal.SIGCONT)

    threading.Thread(target=hang_then_signal, daemon=True).start()
    try:
        with Client(server.url, server.keys["mailer"], timeout=DEADLINE, transport=transport) as c:
            worker.run(c)  # on this, the main thread
        returned.set()
        assert not resumed.is_set(), "the worker stopped only once the server answered"
    finally:
        os.kill(pid, signal.SIGCONT)
