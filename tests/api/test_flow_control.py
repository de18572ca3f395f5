"""Flow control over HTTP, on both backends: groups on jobs, /types, pause and resume,
release with a delay (snooze), limits in claims, and every new 4xx."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from queuelog.clock import FakeClock
from queuelog.config import Settings
from tests.conftest import TYPES, Api, claim_one, enqueue, make_settings

FLOW_TYPES: dict[str, Any] = {
    **TYPES,
    "partner": {"concurrency": 2},
    "tenant": {"group_concurrency": 1},
    "metered": {"rate_limit": {"jobs": 2, "per_seconds": 10}},
    "instant": {"backoff_base_seconds": 0},
}


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return make_settings(tmp_path, types=FLOW_TYPES)


def claim(api: Api, **body: Any) -> list[dict[str, Any]]:
    response = api.post("/jobs/claim", json=body)
    assert response.status_code == 200, response.text
    jobs: list[dict[str, Any]] = response.json()["jobs"]
    return jobs


def complete(api: Api, job: dict[str, Any]) -> None:
    body = {"lease_token": job["lease_token"]}
    assert api.post(f"/jobs/{job['id']}/complete", json=body).status_code == 200


def test_group_is_taken_on_enqueue_and_batch_and_shown(producer: Api, admin: Api) -> None:
    job = enqueue(producer, "tenant", group="acme")
    assert job["group"] == "acme"
    assert enqueue(producer, "noop")["group"] is None
    batch = producer.post(
        "/jobs/batch", json={"jobs": [{"type": "tenant", "group": "g-1"}, {"type": "noop"}]}
    )
    assert batch.status_code == 200
    assert [item["job"]["group"] for item in batch.json()["jobs"]] == ["g-1", None]
    assert admin.get(f"/jobs/{job['id']}").json()["group"] == "acme"


@pytest.mark.parametrize("group", ["", "x" * 129, "caf\u00e9", "tab\there", 7])
def test_a_bad_group_is_refused(producer: Api, group: object) -> None:
    response = producer.post("/jobs", json={"type": "tenant", "group": group})
    assert response.status_code == 422
    assert response.json()["type"] == "validation"
    assert response.headers["content-type"].startswith("application/problem+json")
    batch = producer.post("/jobs/batch", json={"jobs": [{"type": "noop"}, {"group": group}]})
    assert batch.status_code == 422
    assert producer.get("/jobs").json()["jobs"] == []


def test_a_group_is_part_of_the_idempotent_request(producer: Api) -> None:
    first = producer.post("/jobs", json={"type": "tenant", "group": "a", "idempotency_key": "k"})
    assert first.status_code == 201
    again = producer.post("/jobs", json={"type": "tenant", "group": "b", "idempotency_key": "k"})
    assert again.status_code == 422 and again.json()["type"] == "idempotency-key-reused"


def test_types_lists_limits_pauses_and_counts(producer: Api, worker: Api, admin: Api) -> None:
    enqueue(producer, "partner")
    enqueue(producer, "partner")
    claim_one(worker, types=["partner"])
    response = admin.get("/types")
    assert response.status_code == 200
    types = {t["name"]: t for t in response.json()["types"]}
    assert sorted(types) == sorted(FLOW_TYPES)
    assert types["partner"] == {
        "name": "partner",
        "concurrency": 2,
        "group_concurrency": None,
        "rate_limit": None,
        "paused": False,
        "paused_by": None,
        "paused_at": None,
        "counts": {"pending": 1, "waiting": 0, "running": 1, "failed": 0},
    }
    assert types["metered"]["rate_limit"] == {"jobs": 2, "per_seconds": 10.0}
    assert types["tenant"]["group_concurrency"] == 1


def test_types_routes_are_for_admins(producer: Api, worker: Api, anonymous: Api) -> None:
    for api, status in ((producer, 403), (worker, 403), (anonymous, 401)):
        assert api.get("/types").status_code == status
        assert api.post("/types/noop/pause").status_code == status
        assert api.post("/types/noop/resume").status_code == status


def test_pausing_an_unknown_type_is_404(admin: Api) -> None:
    for action in ("pause", "resume"):
        response = admin.post(f"/types/nope/{action}")
        assert response.status_code == 404
        assert response.json()["type"] == "not-found"
        assert response.headers["content-type"].startswith("application/problem+json")
    too_long = admin.post(f"/types/{'x' * 101}/pause")
    assert too_long.status_code == 422 and too_long.json()["type"] == "validation"


def test_a_paused_type_is_not_claimed_and_enqueues_still_land(
    producer: Api, worker: Api, admin: Api, clock: FakeClock
) -> None:
    paused = admin.post("/types/noop/pause")
    assert paused.status_code == 200
    assert paused.json()["paused"] is True and paused.json()["paused_by"] == "root"
    job = enqueue(producer, "noop")
    other = enqueue(producer, "partner")
    assert [j["id"] for j in claim(worker, limit=10)] == [other["id"]]
    assert claim(worker, types=["noop"]) == []
    resumed = admin.post("/types/noop/resume")
    assert resumed.status_code == 200 and resumed.json()["paused"] is False
    assert [j["id"] for j in claim(worker, types=["noop"])] == [job["id"]]


def test_concurrency_holds_and_a_skipped_job_keeps_its_place(
    producer: Api, worker: Api, admin: Api
) -> None:
    jobs = [enqueue(producer, "partner", payload={"n": i}) for i in range(3)]
    plain = enqueue(producer, "noop")
    got = claim(worker, limit=10)
    assert [j["id"] for j in got] == [jobs[0]["id"], jobs[1]["id"], plain["id"]]
    assert claim(worker, limit=10) == []
    complete(worker, got[0])
    assert [j["id"] for j in claim(worker, limit=10)] == [jobs[2]["id"]]
    metrics = admin.get("/metrics").text
    assert 'queuelog_claims_skipped_total{reason="concurrency",type="partner"} 1.0' in metrics
    assert 'queuelog_type_running{type="partner"} 2.0' in metrics


def test_group_concurrency_one_over_http(producer: Api, worker: Api) -> None:
    a1 = enqueue(producer, "tenant", group="a")
    a2 = enqueue(producer, "tenant", group="a")
    b1 = enqueue(producer, "tenant", group="b")
    free = enqueue(producer, "tenant")
    got = claim(worker, limit=10)
    assert sorted(j["id"] for j in got) == sorted([a1["id"], b1["id"], free["id"]])
    complete(worker, next(j for j in got if j["id"] == a1["id"]))
    assert [j["id"] for j in claim(worker, limit=10)] == [a2["id"]]


def test_rate_limit_window_slides_with_the_clock(
    producer: Api, worker: Api, clock: FakeClock
) -> None:
    for _ in range(4):
        enqueue(producer, "metered")
    assert len(claim(worker, limit=10)) == 2
    clock.advance(9.9)
    assert claim(worker, limit=10) == []
    clock.advance(0.2)
    assert len(claim(worker, limit=10)) == 2


def test_hardening_56_a_claim_is_stamped_by_the_clock_read_once_its_type_is_locked(
    producer: Api, worker: Api, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The service hands the storage its clock, read again once the claim holds the
    type's lock: with a clock that moves a second at each read, the job is stamped by
    the last read, not by the one the claim took when it was asked."""
    enqueue(producer, "metered")
    start, reads = clock.now(), []

    def ticking() -> datetime:
        reads.append(start + timedelta(seconds=len(reads) + 1))
        return reads[-1]

    monkeypatch.setattr(clock, "now", ticking)
    (job,) = claim(worker, types=["metered"])
    monkeypatch.undo()
    assert len(reads) >= 2
    assert datetime.fromisoformat(job["claimed_at"]) == reads[-1]


def test_release_with_a_delay_snoozes_the_job(producer: Api, worker: Api, clock: FakeClock) -> None:
    enqueue(producer, "noop")
    job = claim_one(worker)
    body = {"lease_token": job["lease_token"], "delay_seconds": 30}
    response = worker.post(f"/jobs/{job['id']}/release", json=body)
    assert response.status_code == 200, response.text
    back = response.json()
    assert back["status"] == "pending" and back["retry_count"] == 0
    assert back["run_at"] > back["updated_at"]
    assert claim(worker) == []
    clock.advance(30)
    assert claim_one(worker)["id"] == job["id"]


@pytest.mark.parametrize("delay", [-1, 86_401, "soon", None])
def test_a_bad_release_delay_is_refused(producer: Api, worker: Api, delay: object) -> None:
    enqueue(producer, "noop")
    job = claim_one(worker)
    body = {"lease_token": job["lease_token"], "delay_seconds": delay}
    response = worker.post(f"/jobs/{job['id']}/release", json=body)
    assert response.status_code == 422 and response.json()["type"] == "validation"
    # Nothing changed: the job is still held.
    token = {"lease_token": job["lease_token"]}
    assert worker.post(f"/jobs/{job['id']}/heartbeat", json=token).status_code == 200


def test_new_routes_are_in_the_openapi_document(anonymous: Api) -> None:
    paths = anonymous.get("/openapi.json").json()["paths"]
    for path in ("/types/{job_type}/pause", "/types/{job_type}/resume"):
        responses = paths[path]["post"]["responses"]
        assert "application/problem+json" in responses["404"]["content"]
        assert "not configured" in responses["404"]["description"]
        assert "application/problem+json" in responses["422"]["content"]
    assert "403" in paths["/types"]["get"]["responses"]
    release = paths["/jobs/{job_id}/release"]["post"]
    assert "delay_seconds" in release["description"]


def test_a_zero_backoff_base_makes_a_failed_attempt_claimable_at_once(
    producer: Api, worker: Api
) -> None:
    job = enqueue(producer, "instant")
    held = claim_one(worker, types=["instant"])
    body = {"lease_token": held["lease_token"], "error": "flaky"}
    failed = worker.post(f"/jobs/{job['id']}/fail", json=body).json()
    assert failed["status"] == "pending" and failed["retry_count"] == 1
    assert claim_one(worker, types=["instant"])["id"] == job["id"]  # the clock stood still
