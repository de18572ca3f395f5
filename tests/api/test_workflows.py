"""Workflows over HTTP, on both backends: jobs that wait for other jobs, released (or
cancelled) by the transitions that end their dependencies."""

from __future__ import annotations

from typing import Any

import pytest

from queuelog.clock import FakeClock
from tests.conftest import Api, enqueue

CLAIM_ROUNDS = 50  # every drain below ends far sooner


def status(api: Api, job_id: int) -> str:
    answer: str = api.get(f"/jobs/{job_id}").json()["status"]
    return answer


def statuses(api: Api, *jobs: dict[str, Any]) -> list[str]:
    return [status(api, job["id"]) for job in jobs]


def claim(worker: Api, limit: int = 100, **body: Any) -> list[dict[str, Any]]:
    response = worker.post("/jobs/claim", json={"limit": limit, **body})
    assert response.status_code == 200, response.text
    claimed: list[dict[str, Any]] = response.json()["jobs"]
    return claimed


def finish(worker: Api, job: dict[str, Any], fail: bool = False, **body: Any) -> dict[str, Any]:
    """Complete ``job`` (a claimed job), or fail it for good."""
    if fail:
        body = {"error": "broken", "retryable": False, **body}
    response = worker.post(
        f"/jobs/{job['id']}/{'fail' if fail else 'complete'}",
        json={"lease_token": job["lease_token"], **body},
    )
    assert response.status_code == 200, response.text
    done: dict[str, Any] = response.json()
    return done


def run(worker: Api, job: dict[str, Any], fail: bool = False, **body: Any) -> dict[str, Any]:
    """Claim ``job`` (the only ready one), then complete it or fail it for good."""
    claimed = claim(worker)
    assert [c["id"] for c in claimed] == [job["id"]], "only this job is ready"
    return finish(worker, claimed[0], fail, **body)


def batch(producer: Api, *items: dict[str, Any]) -> list[dict[str, Any]]:
    response = producer.post("/jobs/batch", json={"jobs": [{"type": "noop", **i} for i in items]})
    assert response.status_code == 200, response.text
    return [item["job"] for item in response.json()["jobs"]]


def drain(worker: Api) -> list[int]:
    """Claim and complete every ready job, round after round; the ids in the order run."""
    ran: list[int] = []
    for _ in range(CLAIM_ROUNDS):
        claimed = claim(worker)
        if not claimed:
            return ran
        items = [{"id": j["id"], "lease_token": j["lease_token"]} for j in claimed]
        response = worker.post("/jobs/batch/complete", json={"items": items})
        assert {r["status"] for r in response.json()["results"]} == {200}
        ran += [j["id"] for j in claimed]
    raise AssertionError("the queue did not drain")


def events(admin: Api, job_id: int) -> list[tuple[str, str | None, str]]:
    found = admin.get(f"/jobs/{job_id}/events").json()["events"]
    return [(e["event"], e["from_status"], e["to_status"]) for e in found]


def test_a_chain_runs_in_order_each_released_by_the_last_completion(
    producer: Api, worker: Api, admin: Api
) -> None:
    a = enqueue(producer)
    b = enqueue(producer, depends_on=[a["id"]])
    c = enqueue(producer, depends_on=[b["id"]])
    assert (b["status"], b["depends_on"]) == ("waiting", [a["id"]])
    assert a["depends_on"] == [] and c["depends_on"] == [b["id"]]
    run(worker, a)  # only a is claimable: the waiting jobs are never claimed
    assert statuses(producer, b, c) == ["pending", "waiting"]
    run(worker, b, result={"step": "b"})
    assert status(producer, c["id"]) == "pending"
    run(worker, c)
    assert events(admin, c["id"]) == [
        ("enqueued", None, "waiting"),
        ("ready", "waiting", "pending"),
        ("claimed", "pending", "running"),
        ("completed", "running", "completed"),
    ]


def test_a_diamond_waits_for_both_branches(producer: Api, worker: Api) -> None:
    a = enqueue(producer)
    b = enqueue(producer, depends_on=[a["id"]])
    c = enqueue(producer, depends_on=[a["id"]])
    d = enqueue(producer, depends_on=[b["id"], c["id"]])
    run(worker, a)
    branches = claim(worker)
    assert sorted(j["id"] for j in branches) == [b["id"], c["id"]]
    finish(worker, branches[0])
    assert status(producer, d["id"]) == "waiting", "one branch is not enough"
    finish(worker, branches[1])
    run(worker, d)


def test_a_fan_in_of_a_thousand_jobs_runs_its_join_after_the_last(
    producer: Api, worker: Api
) -> None:
    # depends_on takes up to 100 ids: 1,000 jobs -> 10 joins of 100 -> 1 final join.
    leaves = [job["id"] for _ in range(2) for job in batch(producer, *[{}] * 500)]
    joins = batch(producer, *[{"depends_on": leaves[i : i + 100]} for i in range(0, 1000, 100)])
    final = enqueue(producer, depends_on=[j["id"] for j in joins])
    assert {j["status"] for j in joins} == {"waiting"}
    ran = drain(worker)
    assert sorted(ran[:1000]) == leaves, "every leaf runs before any join"
    assert sorted(ran[1000:1010]) == sorted(j["id"] for j in joins)
    assert ran[1010:] == [final["id"]]
    assert status(producer, final["id"]) == "completed"


def test_a_failure_cancels_its_dependents_through_three_levels(
    producer: Api, worker: Api, admin: Api
) -> None:
    a = enqueue(producer)
    b = enqueue(producer, depends_on=[a["id"]])
    c = enqueue(producer, depends_on=[b["id"]])
    d = enqueue(producer, depends_on=[c["id"]])
    other = enqueue(producer)  # not in the graph
    claimed = claim(worker)
    assert {j["id"] for j in claimed} == {a["id"], other["id"]}
    finish(worker, next(j for j in claimed if j["id"] == a["id"]), fail=True)
    assert statuses(producer, b, c, d) == ["cancelled"] * 3
    assert events(admin, c["id"])[-1] == ("dependency_failed", "waiting", "cancelled")
    last = [admin.get(f"/jobs/{j['id']}/events").json()["events"][-1] for j in (b, c)]
    assert [e["detail"] for e in last] == [f"job {a['id']} failed", f"job {b['id']} cancelled"]
    assert status(producer, other["id"]) == "running"


def test_run_mode_runs_once_every_dependency_ended_whatever_the_outcome(
    producer: Api, worker: Api
) -> None:
    a, b = enqueue(producer), enqueue(producer)
    done = enqueue(producer, depends_on=[a["id"], b["id"]], on_dependency_failure="run")
    strict = enqueue(producer, depends_on=[a["id"], b["id"]])
    first, second = claim(worker)
    finish(worker, first, fail=True)
    assert statuses(producer, done, strict) == ["waiting", "cancelled"]
    finish(worker, second)
    assert status(producer, done["id"]) == "pending"
    run(worker, done)


def test_a_retried_dependency_has_not_ended_until_it_ends_for_good(
    producer: Api, worker: Api
) -> None:
    a = enqueue(producer, max_retries=1)
    b = enqueue(producer, depends_on=[a["id"]])
    (held,) = claim(worker)
    finish(worker, held, fail=True, retryable=True, retry_in_seconds=0)
    assert statuses(producer, a, b) == ["pending", "waiting"], "a is retried"
    run(worker, a, fail=True, retryable=True)  # no retries left: failed for good
    assert status(producer, b["id"]) == "cancelled"


def test_a_lease_that_expires_for_good_releases_the_dependents(
    producer: Api, worker: Api, clock: FakeClock
) -> None:
    a = enqueue(producer, max_retries=0)
    b = enqueue(producer, depends_on=[a["id"]], on_dependency_failure="run")
    claim(worker, lease_seconds=1)
    clock.advance(2)
    (released,) = claim(worker)  # the claim rescues the expired lease first
    assert released["id"] == b["id"] and status(producer, a["id"]) == "failed"


def test_a_dependency_already_failed_cancels_the_new_job_at_once(
    producer: Api, worker: Api, admin: Api
) -> None:
    a = enqueue(producer)
    run(worker, a, fail=True)
    response = producer.post("/jobs", json={"type": "noop", "depends_on": [a["id"]]})
    assert response.status_code == 201
    job = response.json()
    assert job["status"] == "cancelled"
    assert events(admin, job["id"]) == [
        ("enqueued", None, "waiting"),
        ("dependency_failed", "waiting", "cancelled"),
    ]
    kept = enqueue(producer, depends_on=[a["id"]], on_dependency_failure="run")
    assert kept["status"] == "pending", "run mode: every dependency has ended"


def test_dependencies_completed_before_the_enqueue_make_it_pending_at_once(
    producer: Api, worker: Api
) -> None:
    a = enqueue(producer)
    run(worker, a)
    b = enqueue(producer, depends_on=[a["id"]])
    assert b["status"] == "pending"
    run(worker, b)


def test_cancelling_a_waiting_job_cancels_what_waits_on_it(producer: Api, worker: Api) -> None:
    a = enqueue(producer)
    b = enqueue(producer, depends_on=[a["id"]])
    c = enqueue(producer, depends_on=[b["id"]])
    response = producer.post(f"/jobs/{b['id']}/cancel")
    assert response.status_code == 200 and response.json()["status"] == "cancelled"
    assert status(producer, c["id"]) == "cancelled"
    run(worker, a)
    assert statuses(producer, b, c) == ["cancelled", "cancelled"]


def test_a_redrive_brings_back_the_jobs_cancelled_because_of_it(
    producer: Api, worker: Api, admin: Api
) -> None:
    a = enqueue(producer)
    b = enqueue(producer, depends_on=[a["id"]])
    c = enqueue(producer, depends_on=[b["id"]])
    after = enqueue(producer, depends_on=[a["id"]], on_dependency_failure="run")
    run(worker, a, fail=True)
    run(worker, after)  # run mode: it ran after a's failure, and is left alone
    assert statuses(producer, b, c) == ["cancelled", "cancelled"]
    retried = admin.post(f"/jobs/{a['id']}/retry")
    assert retried.status_code == 200 and retried.json()["status"] == "pending"
    assert statuses(producer, b, c) == ["waiting", "waiting"]
    assert events(admin, c["id"])[-1] == ("requeued", "cancelled", "waiting")
    assert drain(worker) == [a["id"], b["id"], c["id"]]
    assert status(producer, after["id"]) == "completed"


def test_a_redrive_makes_a_run_mode_dependent_no_worker_took_wait_again(
    producer: Api, worker: Api, admin: Api
) -> None:
    a = enqueue(producer)
    b = enqueue(producer, depends_on=[a["id"]])
    direct = enqueue(producer, depends_on=[a["id"]], on_dependency_failure="run", delay_seconds=60)
    through_b = enqueue(producer, depends_on=[b["id"]], on_dependency_failure="run")
    run(worker, a, fail=True)
    assert statuses(producer, b, direct, through_b) == ["cancelled", "pending", "pending"]
    admin.post(f"/jobs/{a['id']}/retry")
    # b waits for a again, so through_b waits for b: the redrive reaches it through b.
    assert statuses(producer, b, direct, through_b) == ["waiting", "waiting", "waiting"]
    for job in (direct, through_b):
        assert events(admin, job["id"])[-1] == ("requeued", "pending", "waiting")
    assert drain(worker) == [a["id"], b["id"], through_b["id"]]
    assert (
        admin.get(f"/jobs/{direct['id']}").json()["run_at"]
        > admin.get(f"/jobs/{a['id']}").json()["run_at"]
    ), "its delay is kept"


@pytest.mark.parametrize("took", ["snoozed", "retried"])
def test_a_redrive_leaves_a_run_mode_dependent_a_worker_took(
    producer: Api, worker: Api, admin: Api, took: str
) -> None:
    a = enqueue(producer, max_retries=0)
    after = enqueue(producer, depends_on=[a["id"]], on_dependency_failure="run", max_retries=2)
    run(worker, a, fail=True)
    (held,) = claim(worker)
    if took == "snoozed":  # its handler ran, then gave the job back unrun
        release = {"lease_token": held["lease_token"], "delay_seconds": 0}
        assert worker.post(f"/jobs/{after['id']}/release", json=release).status_code == 200
    else:
        finish(worker, held, fail=True, retryable=True, retry_in_seconds=0)
    assert status(producer, after["id"]) == "pending"
    admin.post(f"/jobs/{a['id']}/retry")
    assert status(producer, after["id"]) == "pending", "a worker took it: left alone"


def test_a_redrive_brings_back_a_dependent_whose_unique_key_a_new_job_holds(
    producer: Api, worker: Api, admin: Api
) -> None:
    a = enqueue(producer, max_retries=0)
    b = enqueue(producer, depends_on=[a["id"]], unique_key="report")
    run(worker, a, fail=True)
    assert status(producer, b["id"]) == "cancelled"
    holder = enqueue(producer, unique_key="report")  # the key is free: a new job holds it
    retried = admin.post(f"/jobs/{a['id']}/retry")
    assert retried.status_code == 200, retried.text
    assert statuses(producer, b, holder) == ["waiting", "pending"]
    assert drain(worker) == [*sorted([a["id"], holder["id"]]), b["id"]]


def test_a_job_cancelled_by_a_dependency_retried_by_an_admin_waits_again(
    producer: Api, worker: Api, admin: Api
) -> None:
    a = enqueue(producer)
    b = enqueue(producer, depends_on=[a["id"]])
    run(worker, a, fail=True)
    retried = admin.post(f"/jobs/{b['id']}/retry").json()
    assert retried["status"] == "waiting", "its dependency is still failed"
    assert events(admin, b["id"])[-1] == ("requeued", "cancelled", "waiting")
    admin.post(f"/jobs/{a['id']}/retry")
    assert drain(worker) == [a["id"], b["id"]]


def test_a_redrive_leaves_cancelled_a_job_another_failed_dependency_holds(
    producer: Api, worker: Api, admin: Api
) -> None:
    a, b = enqueue(producer), enqueue(producer)
    c = enqueue(producer, depends_on=[a["id"], b["id"]])
    for job in claim(worker):
        finish(worker, job, fail=True)
    assert status(producer, c["id"]) == "cancelled"
    admin.post(f"/jobs/{a['id']}/retry")
    assert status(producer, c["id"]) == "cancelled", "b is still failed"
    admin.post(f"/jobs/{b['id']}/retry")
    assert status(producer, c["id"]) == "waiting"
    assert drain(worker)[-1] == c["id"]


def test_a_redrive_brings_back_a_job_whose_other_cancelled_dependency_comes_back_too(
    producer: Api, worker: Api, admin: Api
) -> None:
    """Each job waits for every earlier one: the root's failure cancelled them all, the
    later ones also through a dependency it cancelled, and its redrive brings all back."""
    graph = batch(producer, {}, *({"depends_on_items": list(range(i))} for i in range(1, 5)))
    root, *rest = graph
    run(worker, root, fail=True)
    assert statuses(producer, *rest) == ["cancelled"] * 4
    assert admin.post(f"/jobs/{root['id']}/retry").status_code == 200
    assert statuses(producer, *rest) == ["waiting"] * 4
    assert events(admin, rest[-1]["id"])[-1] == ("requeued", "cancelled", "waiting")
    assert drain(worker) == [job["id"] for job in graph]


def test_a_redrive_leaves_cancelled_a_job_waiting_for_one_another_failure_holds(
    producer: Api, worker: Api, admin: Api
) -> None:
    """b waits for the root and for f, c for the root and for b: the root's redrive
    brings back neither while f is still failed, and f's redrive then brings back both."""
    root, f = enqueue(producer), enqueue(producer)
    b = enqueue(producer, depends_on=[root["id"], f["id"]])
    c = enqueue(producer, depends_on=[root["id"], b["id"]])
    held = {job["id"]: job for job in claim(worker)}
    for job in (root, f):
        finish(worker, held[job["id"]], fail=True)
    assert admin.post(f"/jobs/{root['id']}/retry").status_code == 200
    assert statuses(producer, b, c) == ["cancelled", "cancelled"], "f is still failed"
    assert admin.post(f"/jobs/{f['id']}/retry").status_code == 200
    assert statuses(producer, b, c) == ["waiting", "waiting"]
    assert drain(worker) == [root["id"], f["id"], b["id"], c["id"]]


def test_a_batch_makes_a_whole_graph_in_one_request(producer: Api, worker: Api) -> None:
    a, b, c, d = batch(
        producer,
        {},
        {"depends_on_items": [0]},
        {"depends_on_items": [0]},
        {"depends_on_items": [1, 2], "on_dependency_failure": "run"},
    )
    assert [j["status"] for j in (a, b, c, d)] == ["pending", "waiting", "waiting", "waiting"]
    assert d["depends_on"] == [b["id"], c["id"]]
    assert drain(worker) == [a["id"], *sorted([b["id"], c["id"]]), d["id"]]


def test_a_batch_item_waits_for_existing_jobs_and_earlier_items(producer: Api, worker: Api) -> None:
    old = enqueue(producer)
    run(worker, old, fail=True)
    first, second = batch(producer, {"depends_on": [old["id"]]}, {"depends_on_items": [0]})
    assert (first["status"], second["status"]) == ("cancelled", "cancelled")


def test_a_waiting_job_holds_its_unique_key(producer: Api) -> None:
    a = enqueue(producer)
    body = {"type": "noop", "unique_key": "report", "depends_on": [a["id"]]}
    first = producer.post("/jobs", json=body)
    again = producer.post("/jobs", json={**body, "payload": {"v": 2}})
    assert first.status_code == 201 and again.status_code == 200
    assert again.json()["id"] == first.json()["id"]
    replaced = producer.post("/jobs", json={**body, "payload": {"v": 3}, "on_duplicate": "replace"})
    assert replaced.status_code == 200
    assert (replaced.json()["status"], replaced.json()["payload"]) == ("waiting", {"v": 3})


def test_stats_types_and_metrics_count_waiting_jobs(producer: Api, admin: Api) -> None:
    a = enqueue(producer)
    enqueue(producer, depends_on=[a["id"]])
    enqueue(producer, depends_on=[a["id"]])
    stats = admin.get("/stats").json()
    assert stats["by_status"]["waiting"] == 2 and stats["by_type"]["noop"]["waiting"] == 2
    types = {t["name"]: t["counts"] for t in admin.get("/types").json()["types"]}
    assert types["noop"]["waiting"] == 2
    metrics = admin.get("/metrics").text
    assert 'queuelog_jobs{status="waiting",type="noop"} 2.0' in metrics


def test_the_dependents_of_a_job_are_a_list_filter(producer: Api, worker: Api, admin: Api) -> None:
    a = enqueue(producer)
    b = enqueue(producer, depends_on=[a["id"]])
    c = enqueue(producer, depends_on=[a["id"], b["id"]])
    page = producer.get(f"/jobs?depends_on={a['id']}&limit=1").json()
    assert [j["id"] for j in page["jobs"]] == [c["id"]]
    rest = producer.get(f"/jobs?depends_on={a['id']}&cursor={page['next_cursor']}").json()
    assert [j["id"] for j in rest["jobs"]] == [b["id"]] and rest["next_cursor"] is None
    assert producer.get(f"/jobs?depends_on={c['id']}").json()["jobs"] == []
    assert worker.get(f"/jobs?depends_on={a['id']}").json()["jobs"] == [], "it holds none"
    assert len(admin.get(f"/jobs?depends_on={a['id']}").json()["jobs"]) == 2


def test_a_keyed_enqueue_repeated_finds_its_job_and_other_dependencies_are_another_request(
    producer: Api,
) -> None:
    a, b = enqueue(producer), enqueue(producer)
    body = {"type": "noop", "idempotency_key": "graph-1", "depends_on": [a["id"]]}
    first = producer.post("/jobs", json=body)
    again = producer.post("/jobs", json=body)
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json() == first.json()
    other = producer.post("/jobs", json={**body, "depends_on": [b["id"]]})
    assert other.status_code == 422 and other.json()["type"] == "idempotency-key-reused"
