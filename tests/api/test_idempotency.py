"""Idempotency keys: same request 200, different request 422, scoped per principal."""

from __future__ import annotations

from collections.abc import Callable

from queuelog.clock import FakeClock
from queuelog.models import JobStatus
from queuelog.storage.protocol import Storage
from tests.api.test_workflows import claim, finish
from tests.conftest import Api, enqueue, run_blocking


def test_same_key_same_request_returns_existing_job_unchanged(producer: Api) -> None:
    first = enqueue(producer, payload={"a": 1}, idempotency_key="k-1")
    again = producer.post(
        "/jobs", json={"type": "noop", "payload": {"a": 1}, "idempotency_key": "k-1"}
    )
    assert again.status_code == 200
    assert again.json() == first
    assert again.headers["location"] == f"/jobs/{first['id']}"
    assert len(producer.get("/jobs").json()["jobs"]) == 1


def test_same_key_different_request_is_422_idempotency_key_reused(producer: Api) -> None:
    enqueue(producer, payload={"a": 1}, idempotency_key="k-1")
    response = producer.post(
        "/jobs", json={"type": "noop", "payload": {"a": 2}, "idempotency_key": "k-1"}
    )
    assert response.status_code == 422
    assert response.json()["type"] == "idempotency-key-reused"
    priority = producer.post(
        "/jobs",
        json={"type": "noop", "payload": {"a": 1}, "priority": "high", "idempotency_key": "k-1"},
    )
    assert priority.status_code == 422


def test_header_is_the_same_as_the_body_field(producer: Api) -> None:
    first = producer.post("/jobs", json={"type": "noop"}, headers={"Idempotency-Key": "h-1"})
    assert first.status_code == 201 and first.json()["idempotency_key"] == "h-1"
    again = producer.post("/jobs", json={"type": "noop", "idempotency_key": "h-1"})
    assert again.status_code == 200 and again.json()["id"] == first.json()["id"]
    both = producer.post(
        "/jobs", json={"type": "noop", "idempotency_key": "h-1"}, headers={"Idempotency-Key": "h-1"}
    )
    assert both.status_code == 200


def test_header_and_body_that_differ_are_422(producer: Api) -> None:
    response = producer.post(
        "/jobs", json={"type": "noop", "idempotency_key": "a"}, headers={"Idempotency-Key": "b"}
    )
    assert response.status_code == 422 and response.json()["type"] == "validation"


def test_hardening_28_two_idempotency_key_headers_are_422_and_make_nothing(
    producer: Api, admin: Api
) -> None:
    """Two keys, even the same twice: a proxy and this server could each read another."""
    for keys in (["a", "b"], ["a", "a"]):
        headers = [*producer.headers.items(), *(("Idempotency-Key", k) for k in keys)]
        response = producer.client.post("/jobs", json={"type": "noop"}, headers=headers)
        assert response.status_code == 422 and response.json()["type"] == "validation"
        assert "one Idempotency-Key header" in response.json()["detail"]
    assert admin.get("/jobs").json()["jobs"] == []


def test_a_batch_refuses_an_idempotency_key_header_and_makes_nothing(
    producer: Api, admin: Api
) -> None:
    """A batch is keyed item by item: a header it did not read would make a resend a
    second batch, silently."""
    body = {"jobs": [{"type": "noop"}]}
    response = producer.post("/jobs/batch", json=body, headers={"Idempotency-Key": "b-1"})
    assert response.status_code == 422 and response.json()["type"] == "validation"
    assert response.json()["errors"][0]["loc"] == ["header", "Idempotency-Key"]
    assert admin.get("/jobs").json()["jobs"] == []


def test_key_must_be_1_to_255_printable_ascii(producer: Api) -> None:
    for bad in ["", "x" * 256, "caf\u00e9", "tab\there"]:
        response = producer.post("/jobs", json={"type": "noop", "idempotency_key": bad})
        assert response.status_code == 422, bad
    long = producer.post("/jobs", json={"type": "noop"}, headers={"Idempotency-Key": "x" * 256})
    assert long.status_code == 422
    assert enqueue(producer, idempotency_key="x" * 255)["idempotency_key"] == "x" * 255


def test_keys_are_scoped_per_principal_and_reveal_nothing(
    producer: Api, as_key: Callable[..., Api]
) -> None:
    mine = enqueue(producer, payload={"secret": 1}, idempotency_key="order-1")
    other = as_key("rival", "producer")
    theirs = other.post(
        "/jobs", json={"type": "noop", "payload": {"x": 2}, "idempotency_key": "order-1"}
    )
    assert theirs.status_code == 201
    assert theirs.json()["id"] != mine["id"] and theirs.json()["payload"] == {"x": 2}
    assert other.get(f"/jobs/{mine['id']}").status_code == 404


def test_requests_spelt_differently_but_equal_match(producer: Api) -> None:
    first = producer.post(
        "/jobs",
        json={
            "type": "send_email",
            "payload": {"to": "x", "n": 1},
            "delay_seconds": 10,
            "idempotency_key": "same",
        },
    )
    assert first.status_code == 201
    for body in [
        {"payload": {"n": 1.0, "to": "x"}, "delay_seconds": 10.0},
        {"payload": {"to": "x", "n": 1}, "delay_seconds": 10, "max_retries": 5, "priority": "low"},
    ]:
        again = producer.post(
            "/jobs", json={"type": "send_email", "idempotency_key": "same", **body}
        )
        assert again.status_code == 200, (body, again.text)
        assert again.json()["id"] == first.json()["id"]


def test_hardening_100_a_keyed_enqueue_sent_again_after_its_dependency_was_pruned_finds_its_job(
    producer: Api, worker: Api, storage: Storage, clock: FakeClock
) -> None:
    """The dependency ended before its dependent, so retention prunes it first; the
    dependent's request sent again is still the same request: 200 with its job."""
    a = enqueue(producer)
    single = {"type": "noop", "idempotency_key": "k-single", "depends_on": [a["id"]]}
    item = {"type": "noop", "idempotency_key": "k-item", "depends_on": [a["id"]]}
    first = enqueue(producer, **{k: v for k, v in single.items() if k != "type"})
    batch = {"jobs": [item, {"type": "noop", "idempotency_key": "k-next"}]}
    made = producer.post("/jobs/batch", json=batch).json()["jobs"]
    cutoff = None
    for _ in range(4):
        (job,) = claim(worker, limit=1)
        finish(worker, job)
        cutoff = cutoff or clock.advance(1)  # a ended before it, the others at it or after
    assert cutoff is not None
    pruned = run_blocking(storage.job_prune({JobStatus.COMPLETED: cutoff}))
    assert pruned == 1 and producer.get(f"/jobs/{a['id']}").status_code == 404
    again = producer.post("/jobs", json=single)
    assert again.status_code == 200, again.text
    assert again.json()["id"] == first["id"]
    batch_again = producer.post("/jobs/batch", json=batch)
    assert batch_again.status_code == 200, batch_again.text
    answered = [(i["job"]["id"], i["created"]) for i in batch_again.json()["jobs"]]
    assert answered == [(m["job"]["id"], False) for m in made]
    other = producer.post("/jobs", json={**single, "payload": {"v": 2}})
    assert other.json()["type"] == "idempotency-key-reused"
    new_key = producer.post("/jobs", json={**single, "idempotency_key": "k-new"})
    assert new_key.status_code == 422 and new_key.json()["type"] == "validation"


def test_hardening_100_a_key_sent_again_never_lets_a_request_wait_for_another_s_job(
    producer: Api, as_key: Callable[..., Api]
) -> None:
    """Only a dependency that is gone is left to the key's job to answer for: another
    producer's job is refused as ever, since the key's job may be gone too by the time
    the request is stored (pruned meanwhile), and the request would then wait for that
    job, and read its outcome for good."""
    theirs = enqueue(as_key("rival", "producer"))
    mine = enqueue(producer)
    body = {"type": "noop", "idempotency_key": "k-mine", "depends_on": [mine["id"]]}
    assert producer.post("/jobs", json=body).status_code == 201
    again = producer.post("/jobs", json={**body, "depends_on": [theirs["id"]]})
    assert again.status_code == 422, again.text
    assert again.json()["type"] == "validation"
    assert again.json()["errors"][0]["loc"] == ["body", "depends_on", 0]
