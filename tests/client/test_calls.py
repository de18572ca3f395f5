"""The pure layer shared by both clients and the worker: no server needed."""

from __future__ import annotations

import time
import uuid

import httpx
import pytest

from queuelog.client import Fail, Retry, RetryPolicy, ServerError, admin_calls, calls
from queuelog.client.errors import error_from_problem
from queuelog.client.outcome import outcome_of_error, outcome_of_return
from queuelog.client.transport import Broken, NotSent
from queuelog.client.types import Job
from queuelog.errors import NotLeaseHolder, RateLimited, ValidationFailed
from queuelog.models import JobStatus, Priority

REQUEST = httpx.Request("POST", "http://127.0.0.1/jobs")
JOB_JSON = {
    "id": 7, "type": "send_email", "payload": {"to": "a@b.c"}, "priority": "high",
    "status": "running", "retry_count": 1, "max_retries": 3, "idempotency_key": "k",
    "run_at": "2026-11-30T03:32:31.123456Z", "claimed_at": "2026-11-30T03:32:31.123456Z",
    "lease_expires_at": "2026-11-30T03:33:01.123456Z", "worker_id": "mailer/a",
    "error": None, "result": None, "created_at": "2026-11-30T03:32:31.123456Z",
    "updated_at": "2026-11-30T03:32:31.123456Z", "lease_token": "t",
}  # fmt: skip


def test_job_is_parsed_into_enums_and_aware_times() -> None:
    job = Job.from_json(JOB_JSON)
    assert job.priority is Priority.HIGH and job.status is JobStatus.RUNNING
    assert job.run_at.tzinfo is not None and job.lease_seconds == 30
    assert job.lease_token == "t"


def test_every_enqueue_carries_an_idempotency_key_of_its_own() -> None:
    first, second = calls.enqueue("noop"), calls.enqueue("noop")
    assert first.json["idempotency_key"] != second.json["idempotency_key"]
    assert calls.enqueue("noop", idempotency_key="mine").json["idempotency_key"] == "mine"
    batch = calls.enqueue_many([{"type": "noop"}, {"type": "noop", "idempotency_key": "x"}])
    keys = [item["idempotency_key"] for item in batch.json["jobs"]]
    assert keys[0] and keys[1] == "x"


def test_the_client_s_keys_are_uuid7_that_rise_with_the_clock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Time-ordered keys: the server's index of keys takes each new one at its end."""
    start = 1_796_000_000_000_000_000  # ns since the epoch
    clock = iter(range(start, start + 4_000_000, 10_000))  # 400 reads, 10 us apart
    monkeypatch.setattr(time, "time_ns", lambda: next(clock))
    singles = [calls.enqueue("noop").json["idempotency_key"] for _ in range(200)]
    batch = calls.enqueue_many([{"type": "noop"}] * 200).json["jobs"]
    keys = singles + [item["idempotency_key"] for item in batch]
    parsed = [uuid.UUID(key) for key in keys]
    assert {(key.version, key.variant) for key in parsed} == {(7, uuid.RFC_4122)}
    assert keys == sorted(keys) and len(set(keys)) == len(keys)  # within a millisecond too
    millis = [key.int >> 80 for key in parsed]
    assert millis[0] == start // 1_000_000 and millis[-1] == start // 1_000_000 + 3


def test_only_calls_that_are_safe_twice_may_be_resent() -> None:
    job = Job.from_json(JOB_JSON)
    assert not calls.claim().resend and not admin_calls.create_key("k", ["worker"]).resend
    safe = [calls.enqueue("noop"), calls.get(1), calls.complete(job), calls.fail(job, "x")]
    assert all(call.resend for call in safe)


@pytest.mark.parametrize(
    ("error", "claim_retried", "enqueue_retried"),
    [
        (httpx.ConnectError("refused", request=REQUEST), True, True),
        (httpx.ReadError("reset", request=REQUEST), False, True),
        (httpx.ReadTimeout("slow", request=REQUEST), False, True),
        (NotSent("refused"), True, True),
        (Broken("reset"), False, True),
        (ServerError("busy", status=503), False, True),
        (ServerError("bug", status=500), False, False),
    ],
)
def test_retry_policy_resends_by_where_the_failure_happened(
    error: Exception, claim_retried: bool, enqueue_retried: bool
) -> None:
    policy = RetryPolicy(attempts=2)
    assert policy.should_retry(calls.claim(), error, 1) is claim_retried
    assert policy.should_retry(calls.enqueue("noop"), error, 1) is enqueue_retried
    assert not policy.should_retry(calls.enqueue("noop"), error, 2)  # attempts used up


def test_a_lease_token_is_needed_to_report_on_a_job() -> None:
    with pytest.raises(ValueError, match="lease token"):
        calls.complete(7)
    assert calls.complete(7, lease_token="t").json == {"lease_token": "t"}


def test_problems_map_to_exceptions_by_slug() -> None:
    problem = {"type": "validation", "title": "t", "status": 422, "detail": "d", "errors": [1]}
    error = error_from_problem(422, problem)
    assert isinstance(error, ValidationFailed) and error.extra["errors"] == [1]
    assert isinstance(error_from_problem(409, {"type": "not-lease-holder"}), NotLeaseHolder)
    limited = error_from_problem(429, {"type": "rate-limited"}, "3")
    assert isinstance(limited, RateLimited) and limited.retry_after == 3
    odd = error_from_problem(502, None)
    assert isinstance(odd, ServerError) and odd.status == 502


def test_handler_outcomes() -> None:
    assert outcome_of_return(None).completed and outcome_of_return(None).result is None
    assert outcome_of_return({"a": 1}).result == {"a": 1}
    assert outcome_of_return([1]).result == {"value": [1]}
    assert not outcome_of_return({"x": object()}).retryable  # not JSON: fails for good
    # Keys JSON writes alike would name a member twice, which the server refuses.
    collided = outcome_of_return({"by_status": {1: "a", "1": "b"}})
    assert not collided.completed and "more than once" in str(collided.error)
    retry = outcome_of_error(Retry("later", after=5))
    assert (retry.retryable, retry.retry_in_seconds, retry.error) == (True, 5, "later")
    fail = outcome_of_error(Fail("never"))
    assert (fail.retryable, fail.error) == (False, "never")
    crash = outcome_of_error(KeyError("to"))
    assert crash.retryable and crash.error == "KeyError: 'to'"
