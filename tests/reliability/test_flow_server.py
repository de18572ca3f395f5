"""Flow control in a real server, on both backends: a pause survives a restart, and a
long-polling claim is woken when a slot frees or a rate window reopens."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.postgres import fresh_schema
from tests.realserver import RealServer, closing

pytestmark = pytest.mark.slow

TYPES = {
    "partner": {"concurrency": 1, "lease_seconds": 30},
    "metered": {"rate_limit": {"jobs": 1, "per_seconds": 2}},
    "noop": {},
}


@pytest.fixture(params=["sqlite", "postgres"])
def real(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RealServer]:
    with ExitStack() as stack:
        env = {}
        if request.param == "postgres":
            env["QUEUELOG_DATABASE_URL"] = stack.enter_context(fresh_schema())
        yield stack.enter_context(closing(RealServer(tmp_path, types=TYPES, env=env)))


def test_a_pause_survives_a_restart(real: RealServer) -> None:
    admin = real.create_key("root", "admin")
    producer = real.create_key("shop", "producer")
    worker = real.create_key("mailer", "worker")
    real.start()
    with real.client(admin) as client:
        assert client.post("/types/noop/pause").status_code == 200
    real.terminate()
    real.start()
    with real.client(producer) as prod, real.client(worker) as work, real.client(admin) as adm:
        job = prod.post("/jobs", json={"type": "noop"}).json()
        assert work.post("/jobs/claim", json={}).json()["jobs"] == []
        (entry,) = [t for t in adm.get("/types").json()["types"] if t["name"] == "noop"]
        assert entry["paused"] is True and entry["paused_by"] == "root"
        assert adm.post("/types/noop/resume").status_code == 200
        assert [j["id"] for j in work.post("/jobs/claim", json={}).json()["jobs"]] == [job["id"]]


def test_a_waiting_claim_is_woken_by_a_freed_slot_and_a_reopened_window(
    real: RealServer,
) -> None:
    producer = real.create_key("shop", "producer")
    worker = real.create_key("mailer", "worker")
    real.start()
    with real.client(producer) as prod, real.client(worker) as work, ThreadPoolExecutor(1) as pool:
        first, second = (prod.post("/jobs", json={"type": "partner"}).json() for _ in range(2))
        (held,) = work.post("/jobs/claim", json={"types": ["partner"]}).json()["jobs"]
        assert held["id"] == first["id"]
        started = time.monotonic()
        waiting = pool.submit(
            work.post, "/jobs/claim", json={"types": ["partner"], "wait_seconds": 20}
        )
        time.sleep(0.5)
        assert not waiting.done()  # the slot is taken: the claim waits
        body = {"lease_token": held["lease_token"]}
        assert work.post(f"/jobs/{held['id']}/complete", json=body).status_code == 200
        got = waiting.result(timeout=30).json()["jobs"]
        assert [j["id"] for j in got] == [second["id"]]
        assert time.monotonic() - started < 15, "the claim waited for its deadline"

        for _ in range(2):
            prod.post("/jobs", json={"type": "metered"})
        assert len(work.post("/jobs/claim", json={"types": ["metered"]}).json()["jobs"]) == 1
        started = time.monotonic()
        again = work.post("/jobs/claim", json={"types": ["metered"], "wait_seconds": 20})
        assert len(again.json()["jobs"]) == 1  # answered once the window had room again
        assert time.monotonic() - started < 15, "the claim waited for its deadline"
