"""Several queuelog nodes on one PostgreSQL database, as real server processes.

Bounded loops and generous timeouts; nothing here asserts on speed.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from queuelog.api.app import create_app
from queuelog.cli import main
from queuelog.models import Role
from queuelog.storage.sqlfile import load_migrations
from tests.conftest import make_settings, run_blocking
from tests.postgres import fresh_schema, subscribed
from tests.realserver import RealServer, closing

pytestmark = pytest.mark.slow

JOBS = 3000
LEASE_SECONDS = 3
TYPES = {
    "work": {
        "max_retries": 25,
        "lease_seconds": LEASE_SECONDS,
        "backoff_base_seconds": 0.05,
        "backoff_cap_seconds": 0.2,
    }
}


@dataclass
class Cluster:
    url: str
    keys: dict[str, str]
    nodes: list[RealServer]
    alive: list[bool] = field(default_factory=list)

    @property
    def urls(self) -> list[str]:
        return [node.url for node in self.nodes]

    def headers(self, role: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys[role]}"}

    def kill(self, node: int) -> None:
        self.alive[node] = False
        self.nodes[node].kill()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """Three ``queuelog serve`` processes on one fresh schema."""
    with fresh_schema() as url, ExitStack() as stack:
        env = {"QUEUELOG_DATABASE_URL": url}
        nodes = [
            stack.enter_context(closing(RealServer(tmp_path / f"node{n}", TYPES, env=env)))
            for n in range(3)
        ]
        for role in ("admin", "producer", "worker"):
            nodes[0].create_key(role, role, max_priority="critical")
        for node in nodes:
            node.launch()
        for node in nodes:
            node.wait_ready()
        yield Cluster(url, nodes[0].keys, nodes, alive=[True] * 3)


class Tally:
    """What the workers saw, shared between their threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.completed: Counter[int] = Counter()
        self.leases: Counter[tuple[int, str]] = Counter()
        self.stale = 0
        self.done = threading.Event()

    def record_claims(self, jobs: list[dict[str, Any]]) -> None:
        with self.lock:
            for job in jobs:
                self.leases[(job["id"], job["lease_token"])] += 1

    def record_results(self, results: list[dict[str, Any]]) -> None:
        with self.lock:
            for item in results:
                if item["status"] == 200:
                    self.completed[item["id"]] += 1
                else:
                    assert item["type"] == "not-lease-holder", item
                    self.stale += 1


def work(cluster: Cluster, node: int, tally: Tally, deadline: float) -> None:
    """Claim and complete until all jobs are done; if the node dies, so do the held jobs."""
    headers = cluster.headers("worker")
    claim = {"limit": 10, "wait_seconds": 1, "lease_seconds": LEASE_SECONDS}
    with httpx.Client(timeout=30) as http:
        while not tally.done.is_set() and time.monotonic() < deadline:
            if not cluster.alive[node]:
                node = (node + 1) % len(cluster.urls)
                continue
            base = cluster.urls[node]
            try:
                answer = http.post(f"{base}/jobs/claim", json=claim, headers=headers)
                assert answer.status_code == 200, answer.text
                jobs = answer.json()["jobs"]
                tally.record_claims(jobs)
                if not jobs:
                    continue
                items = [{"id": j["id"], "lease_token": j["lease_token"]} for j in jobs]
                answer = http.post(
                    f"{base}/jobs/batch/complete", json={"items": items}, headers=headers
                )
                assert answer.status_code == 200, answer.text
                tally.record_results(answer.json()["results"])
            except httpx.TransportError:
                # The node is gone (or going): the jobs this worker held are lost with it.
                time.sleep(0.1)


def enqueue(cluster: Cluster, batches: range) -> None:
    """500 jobs a batch, spread over the live nodes; idempotency keys make resending safe."""
    headers = cluster.headers("producer")
    with httpx.Client(timeout=60) as http:
        for batch in batches:
            jobs = [
                {"type": "work", "payload": {"n": n}, "idempotency_key": f"job-{n}"}
                for n in range(batch * 500, (batch + 1) * 500)
            ]
            for attempt in range(6):
                node = (batch + attempt) % 3
                if not cluster.alive[node]:
                    continue
                try:
                    answer = http.post(
                        f"{cluster.urls[node]}/jobs/batch", json={"jobs": jobs}, headers=headers
                    )
                except httpx.TransportError:
                    continue  # the node died under us: send the same batch elsewhere
                assert answer.status_code == 200, answer.text
                break
            else:
                raise AssertionError(f"batch {batch} was not accepted by any node")


def kill_mid_run(cluster: Cluster, tally: Tally, deadline: float) -> None:
    while len(tally.completed) < JOBS // 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    print(f"\nkilling node 0 after {len(tally.completed)} completions")
    cluster.kill(0)


def wait_until_all_completed(cluster: Cluster, tally: Tally, deadline: float) -> int:
    """Watch the database (a completion whose answer died with its node still counts)."""
    completed = 0
    with psycopg.connect(cluster.url, autocommit=True) as conn:
        while completed < JOBS and time.monotonic() < deadline:
            time.sleep(0.1)
            row = conn.execute("SELECT count(*) FROM jobs WHERE status = 'completed'").fetchone()
            completed = row[0] if row else 0
    tally.done.set()
    return completed


def job_histories(url: str) -> dict[int, list[str]]:
    histories: dict[int, list[str]] = {}
    with psycopg.connect(url) as conn:
        for job_id, event in conn.execute("SELECT job_id, event FROM job_events ORDER BY id"):
            histories.setdefault(job_id, []).append(event)
    return histories


def assert_one_live_lease_at_a_time(history: list[str]) -> None:
    """enqueued, then (claimed, lease_expired | retry_scheduled)*, claimed, completed."""
    assert history[0] == "enqueued" and history[-2:] == ["claimed", "completed"], history
    middle = history[1:-2]
    assert middle[0::2] == ["claimed"] * (len(middle) // 2), history
    assert set(middle[1::2]) <= {"lease_expired", "retry_scheduled"}, history


def test_three_nodes_share_the_work_and_a_killed_node_loses_nothing(cluster: Cluster) -> None:
    tally = Tally()
    deadline = time.monotonic() + 240
    enqueue(cluster, range(1))
    # A worker on node 0 takes jobs and hangs; node 0 will die mid-run.
    with httpx.Client(timeout=30) as http:
        answer = http.post(
            f"{cluster.urls[0]}/jobs/claim",
            json={"limit": 20, "lease_seconds": LEASE_SECONDS},
            headers=cluster.headers("worker"),
        )
    hung = [job["id"] for job in answer.json()["jobs"]]
    assert len(hung) == 20
    workers = [
        threading.Thread(target=work, args=(cluster, i % 3, tally, deadline), daemon=True)
        for i in range(12)
    ]
    killer = threading.Thread(target=kill_mid_run, args=(cluster, tally, deadline))
    for thread in [*workers, killer]:
        thread.start()
    enqueue(cluster, range(1, JOBS // 500))
    killer.join(timeout=240)
    assert not cluster.alive[0]
    completed = wait_until_all_completed(cluster, tally, deadline)
    assert completed == JOBS, f"{completed} of {JOBS} jobs completed"
    for thread in workers:
        thread.join(timeout=60)
    assert set(tally.completed.values()) == {1}, "a job was completed twice"
    assert set(tally.leases.values()) == {1}, "a lease token was handed out twice"
    histories = job_histories(cluster.url)
    assert len(histories) == JOBS
    for history in histories.values():
        assert_one_live_lease_at_a_time(history)
    expired = [job_id for job_id, h in histories.items() if "lease_expired" in h]
    print(f"{len(expired)} jobs came back through lease expiry; {tally.stale} stale completes")
    print(f"{JOBS - len(tally.completed)} completions committed but not answered (node killed)")
    assert all("lease_expired" in histories[job_id] for job_id in hung)


def test_enqueue_on_one_node_wakes_a_long_poll_on_another(tmp_path: Path) -> None:
    with fresh_schema() as url:
        # No recheck within the claim's wait: only node B's wake-up can answer it.
        settings = make_settings(tmp_path, database=url, server={"claim_recheck_seconds": 30})
        node_a, node_b = create_app(settings), create_app(settings)
        with TestClient(node_a) as client_a, TestClient(node_b) as client_b:
            keys = node_a.state.queuelog.keys
            producer = run_blocking(keys.create("shop", frozenset({Role.PRODUCER})))[1]
            worker = run_blocking(keys.create("mailer", frozenset({Role.WORKER})))[1]
            subscribed(node_b.state.queuelog.service.storage)
            answers: list[httpx.Response] = []
            waiting = threading.Thread(
                target=lambda: answers.append(
                    client_b.post(
                        "/jobs/claim",
                        json={"wait_seconds": 30},
                        headers={"Authorization": f"Bearer {worker}"},
                    )
                )
            )
            waiting.start()
            enqueued = client_a.post(
                "/jobs", json={"type": "noop"}, headers={"Authorization": f"Bearer {producer}"}
            )
            assert enqueued.status_code == 201, enqueued.text
            sent = time.monotonic()
            waiting.join(timeout=60)
            (answer,) = answers
            assert [j["id"] for j in answer.json()["jobs"]] == [enqueued.json()["id"]]
            # Not the end of the wait, when it would have looked again anyway.
            assert time.monotonic() - sent < 20


def test_migrate_and_keys_commands_work_against_postgresql() -> None:
    with fresh_schema() as url:
        runner = CliRunner()
        env = {"QUEUELOG_DATABASE_URL": url, "QUEUELOG_CONFIG": ""}
        migrated = runner.invoke(main, ["migrate"], env=env)
        assert migrated.exit_code == 0, migrated.output
        again = runner.invoke(main, ["migrate"], env=env)
        assert again.exit_code == 0, again.output
        created = runner.invoke(
            main, ["keys", "create", "--name", "ops", "--role", "admin"], env=env
        )
        assert created.exit_code == 0, created.output
        listed = runner.invoke(main, ["keys", "list"], env=env)
        assert "ops" in listed.output and "active" in listed.output
        with psycopg.connect(url) as conn:
            versions = [r[0] for r in conn.execute("SELECT version FROM schema_migrations")]
        assert versions == [n for n, _ in load_migrations("queuelog.storage.postgres")]
