"""Client loops, each run in its own process over persistent httpx connections.

Every loop is bounded in count and in time.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

# A 100-byte payload, as in the reference figures.
PAYLOAD = {"data": "x" * 88}


def job_body(job_type: str = "noop", group: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"type": job_type, "payload": PAYLOAD}
    if group is not None:
        body["group"] = group
    return body


def client(url: str, key: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60)


def expect(response: httpx.Response, status: int = 200) -> Any:
    if response.status_code != status:
        raise RuntimeError(f"{response.request.url.path}: {response.status_code} {response.text}")
    return response.json()


def fill_queue(url: str, key: str, count: int, job_type: str = "noop", groups: int = 0) -> None:
    """Enqueue ``count`` jobs of ``job_type`` in batches of up to 500; with ``groups``,
    spread over that many groups."""
    with client(url, key) as c:
        for start in range(0, count, 500):
            jobs = [
                job_body(job_type, f"g{(start + i) % groups}" if groups else None)
                for i in range(min(500, count - start))
            ]
            expect(c.post("/jobs/batch", json={"jobs": jobs}))


@dataclass
class _Task:
    url: str
    key: str
    seconds: float
    http: httpx.Client | None = field(default=None, repr=False)

    def open(self) -> None:
        self.http = client(self.url, self.key)
        self.http.get("/healthz")

    @property
    def c(self) -> httpx.Client:
        assert self.http is not None
        return self.http


@dataclass
class EnqueueSingle(_Task):
    """One job per request, from ``connections`` threads with a connection each."""

    count: int = 1000
    connections: int = 1
    pool: list[httpx.Client] = field(default_factory=list, repr=False)

    def open(self) -> None:
        self.pool = [client(self.url, self.key) for _ in range(self.connections)]
        for c in self.pool:
            c.get("/healthz")

    def run(self) -> tuple[int, dict[str, Any]]:
        deadline = time.monotonic() + self.seconds
        share = self.count // self.connections
        done: list[int] = []

        def send(c: httpx.Client) -> None:
            n = 0
            while n < share and time.monotonic() < deadline:
                expect(c.post("/jobs", json=job_body()), 201)
                n += 1
            done.append(n)

        threads = [threading.Thread(target=send, args=(c,)) for c in self.pool]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if len(done) != len(threads):
            raise RuntimeError("an enqueue thread failed")
        return sum(done), {}


@dataclass
class RawEnqueueSingle(_Task):
    """One job per request over ``connections`` keep-alive HTTP/1.1 connections.

    A lean load generator (like wrk): requests are written from prepared bytes
    and only the status line and ``Content-Length`` of each answer are read, so
    the client's own cost does not cap the figure on a machine it shares with
    the server. Every answer must be 201.
    """

    count: int = 1000
    connections: int = 8

    def open(self) -> None:
        host, port = self.url.removeprefix("http://").split(":")
        self.address = (host, int(port))
        body = json.dumps(job_body()).encode()
        self.request = (
            f"POST /jobs HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {self.key}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode() + body

    def run(self) -> tuple[int, dict[str, Any]]:
        return asyncio.run(self._run()), {}

    async def _run(self) -> int:
        deadline = time.monotonic() + self.seconds
        share = self.count // self.connections
        done = await asyncio.gather(
            *(self._connection(share, deadline) for _ in range(self.connections))
        )
        return sum(done)

    async def _connection(self, share: int, deadline: float) -> int:
        reader, writer = await asyncio.open_connection(*self.address)
        n = 0
        try:
            while n < share and time.monotonic() < deadline:
                writer.write(self.request)
                head = await reader.readuntil(b"\r\n\r\n")
                status = head[9:12]
                length = 0
                for line in head.split(b"\r\n"):
                    if line[:15].lower() == b"content-length:":
                        length = int(line[15:])
                answer = await reader.readexactly(length)
                if status != b"201":
                    raise RuntimeError(f"POST /jobs: {status.decode()} {answer[:200]!r}")
                n += 1
        finally:
            writer.close()
        return n


@dataclass
class EnqueueBatch(_Task):
    count: int = 1000
    size: int = 100

    def run(self) -> tuple[int, dict[str, Any]]:
        deadline = time.monotonic() + self.seconds
        done = 0
        body = {"jobs": [job_body() for _ in range(self.size)]}
        while done < self.count and time.monotonic() < deadline:
            expect(self.c.post("/jobs/batch", json=body))
            done += self.size
        return done, {}


def claim_and_complete(
    c: httpx.Client, limit: int, wait: float = 0, types: list[str] | None = None
) -> int:
    """One worker step: claim up to ``limit`` jobs, acknowledge them; the jobs done."""
    body: dict[str, Any] = {"limit": limit}
    if wait:
        body["wait_seconds"] = wait
    if types:
        body["types"] = types
    jobs = expect(c.post("/jobs/claim", json=body))["jobs"]
    if limit == 1:
        for job in jobs:
            expect(c.post(f"/jobs/{job['id']}/complete", json={"lease_token": job["lease_token"]}))
    elif jobs:
        items = [{"id": j["id"], "lease_token": j["lease_token"]} for j in jobs]
        results = expect(c.post("/jobs/batch/complete", json={"items": items}))["results"]
        if any(r["status"] != 200 for r in results):
            raise RuntimeError(f"batch complete refused an item: {results}")
    return len(jobs)


@dataclass
class BurnWorker(_Task):
    """Claims and completes until the queue is empty (or time is up). ``wait``: how
    long an empty claim long-polls before the worker takes the queue for empty (jobs
    held back by a group limit are claimable once another worker's job ends)."""

    limit: int = 1
    types: list[str] | None = None
    wait: float = 0

    def run(self) -> tuple[int, dict[str, Any]]:
        deadline = time.monotonic() + self.seconds
        done = 0
        while time.monotonic() < deadline:
            got = claim_and_complete(self.c, self.limit, self.wait, self.types)
            if not got:
                break
            done += got
        return done, {}


@dataclass
class SteadyProducer(_Task):
    """Enqueues batches at full speed for ``seconds``."""

    size: int = 100

    def run(self) -> tuple[int, dict[str, Any]]:
        deadline = time.monotonic() + self.seconds
        body = {"jobs": [job_body() for _ in range(self.size)]}
        done = 0
        while time.monotonic() < deadline:
            expect(self.c.post("/jobs/batch", json=body))
            done += self.size
        return 0, {"enqueued": done}


@dataclass
class SteadyWorker(_Task):
    """Claims (long-polling briefly when the queue is empty) for ``seconds``."""

    limit: int = 50

    def run(self) -> tuple[int, dict[str, Any]]:
        deadline = time.monotonic() + self.seconds
        done = 0
        while (left := deadline - time.monotonic()) > 0:
            done += claim_and_complete(self.c, self.limit, wait=round(min(left, 0.5), 3))
        return done, {}


@dataclass
class LatencyWorker(_Task):
    """Long-polls for one job at a time and reports how long after its enqueue it came."""

    samples: int = 200
    out: Any = None

    def run(self) -> tuple[int, dict[str, Any]]:
        deadline = time.monotonic() + self.seconds
        got = 0
        while got < self.samples and time.monotonic() < deadline:
            body = {"limit": 1, "wait_seconds": 2}
            jobs = expect(self.c.post("/jobs/claim", json=body))["jobs"]
            received = time.monotonic()
            for job in jobs:
                self.out.put(received - job["payload"]["sent"])
                got += 1
                lease = {"lease_token": job["lease_token"]}
                expect(self.c.post(f"/jobs/{job['id']}/complete", json=lease))
        return got, {}


@dataclass
class LatencyProducer(_Task):
    """Enqueues one job at a time once the worker is back in its long poll."""

    samples: int = 200
    out: Any = None

    def run(self) -> tuple[int, dict[str, Any]]:
        deadline = time.monotonic() + self.seconds
        latencies: list[float] = []
        while len(latencies) < self.samples and time.monotonic() < deadline:
            time.sleep(0.01)  # the worker finishes its last job and waits again
            payload = {"sent": time.monotonic(), **PAYLOAD}
            expect(self.c.post("/jobs", json={"type": "noop", "payload": payload}), 201)
            latencies.append(self.out.get(timeout=10))
        return len(latencies), {"latencies": latencies}


def acks_counted(url: str, key: str, task: Any) -> Any:
    """An SDK ``Client`` that adds to ``task.acked`` the jobs each of the Worker's
    acknowledgements completed, and notes in ``task.acked_at`` when it was answered."""
    from queuelog.client import Client  # only there once the SDK has landed

    class Counted(Client):
        def send(self, call: Any) -> Any:
            answer = super().send(call)
            if call.path == "/jobs/batch/complete":
                task.acked += sum(1 for a in answer if a.ok)
                task.acked_at = time.monotonic()
            return answer

    return Counted(url, key, timeout=30.0)


@dataclass
class SdkBurnWorker(_Task):
    """The SDK's ``queuelog.Worker`` with a no-op handler, until the queue is drained.

    It runs ``concurrency`` handlers (the Worker's default, 4) with ``prefetch``
    jobs claimed ahead of them, so claims are of up to 100 jobs (the API's limit),
    and acknowledges them in batches (``POST /jobs/batch/complete``). More handler
    threads only add thread hand-offs for a no-op handler: 32 threads with
    ``prefetch=64`` cost the worker processes about a third more CPU per job on this
    2-core machine.

    The work ends when the server answered the last acknowledgement, as for the
    other burn-down loops: that is when the last job was durably completed. The
    process then stops its worker once no job has come for ``idle`` seconds;
    that wait and the winding down after it (a long-poll claim still out, up to
    ``wait_seconds``) are not counted.
    """

    concurrency: int = 4
    prefetch: int = 96
    idle: float = 0.5

    def open(self) -> None:
        from queuelog.client import Worker  # only there once the SDK has landed

        self.worker = Worker(
            concurrency=self.concurrency,
            prefetch=self.prefetch,
            wait_seconds=0.25,
            idle_seconds=0.05,
        )
        self.last = time.monotonic()
        self.acked = 0
        self.acked_at = 0.0
        self.client = acks_counted(self.url, self.key, self)

        @self.worker.handler("noop")
        def noop(job: Any) -> None:
            self.last = time.monotonic()

    def run(self) -> tuple[int, dict[str, Any]]:
        deadline = time.monotonic() + self.seconds
        self.last = time.monotonic()
        watcher = threading.Thread(target=self._stop_when_idle, args=(deadline,), daemon=True)
        watcher.start()
        try:
            self.worker.run(self.client)
        finally:
            self.client.close()
        return self.acked, {"ended": self.acked_at} if self.acked else {}

    def _stop_when_idle(self, deadline: float) -> None:
        while time.monotonic() < deadline and time.monotonic() - self.last < self.idle:
            time.sleep(0.05)
        self.worker.stop()
