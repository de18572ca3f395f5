"""The one description of every API call: how its request is built, how its answer is read,
and whether it is safe to send again. Pure: no I/O. ``Client`` and ``AsyncClient`` only
send what is built here."""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypedDict, TypeVar, Unpack

from queuelog.client.errors import ServerError, error_from_item, error_from_problem
from queuelog.client.types import (
    Acknowledged,
    Dependency,
    Enqueued,
    Event,
    EventPage,
    Job,
    JsonObject,
    Page,
)
from queuelog.clock import rfc3339

T = TypeVar("T")
JobRef = Job | int


@dataclass(frozen=True, slots=True)
class Produces:
    """What an enqueue call sends, for its producer span (``client/tracing.py``): the
    type of each job, and whether it is a batch."""

    types: tuple[str, ...]
    batch: bool = False


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One request and the reading of its answer.

    ``resend`` says whether the request may be sent again when the connection broke after
    it may have reached the server: true only when a second delivery cannot do harm.
    A request that never reached the server (connection refused) is always sent again.
    """

    method: str
    path: str
    read: Callable[[Any], T]
    resend: bool
    json: Any = None
    params: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    wait_seconds: float = 0.0  # the server may hold the answer this long (long-poll)
    produces: Produces | None = None  # an enqueue: traced as a producer's send
    # A wait's read: the seconds its wait has left. It is not sent again once they are up
    # or after a pause that outlasts them; sent again, it is held no longer than they last.
    remaining: Callable[[], float] | None = None
    # Told when the call is sent again after a try that may have reached the server (its
    # answer lost): a refusal of the second delivery may be the first one's doing.
    again: Callable[[], None] | None = None


def answer(call: Call[T], status: int, content: bytes, retry_after: str | None) -> T:
    """What a call returns for a (fully read) answer, or the error it raises. Only a 2xx
    answer of the call's shape is a success; any other that is no error (a proxy's
    redirect to https, JSON of another shape) is a ServerError with its own status: a
    call that did not happen never reads as done, and one answered is not sent again."""
    try:
        body = _READER.decode(content.decode()) if content else None
    except (ValueError, RecursionError):  # UnicodeDecodeError too
        body = _NOT_JSON
    if status >= 400:
        raise error_from_problem(status, body, retry_after)
    said = f"the answer to {call.method} {call.path}"
    if not 200 <= status < 300:
        raise ServerError(f"{said} is HTTP {status}, not the API's", status, "unexpected-status")
    if body is _NOT_JSON:
        raise ServerError(f"{said} is not JSON", status, "not-json")
    try:
        return call.read(body)
    except (KeyError, IndexError, TypeError, ValueError, AttributeError, RecursionError) as exc:
        reason = f"{type(exc).__name__}: {exc}"
        raise ServerError(f"{said} cannot be read ({reason})", status, "unreadable") from exc


def _refused(constant: str) -> Any:
    """NaN and Infinity, which Python's reader takes and JSON has not."""
    raise ValueError(f"{constant} is not JSON")


_READER = json.JSONDecoder(parse_constant=_refused)  # made once, not at every answer
_NOT_JSON = object()


def new_idempotency_key() -> str:
    """A new UUID of version 7 (RFC 9562): the Unix time in milliseconds and, in the bits
    the RFC lets a clock of finer precision fill, the fraction of the millisecond; then
    random bits. Keys made one after another rise with the clock, so the server's index
    of keys takes each at its end, not on a random page (a large batch's insert feels it)."""
    millis, nanos = divmod(time.time_ns(), 1_000_000)
    fraction = nanos * 4096 // 1_000_000  # rand_a, in the RFC's method 3
    random = int.from_bytes(os.urandom(8), "big") & (1 << 62) - 1
    value = millis << 80 | 0x7 << 76 | fraction << 64 | 0b10 << 62 | random
    return str(uuid.UUID(int=value))


def _job_id(job: JobRef) -> int:
    return job.id if isinstance(job, Job) else int(job)


def _lease_token(job: JobRef, lease_token: str | None) -> str:
    token = lease_token or (job.lease_token if isinstance(job, Job) else None)
    if not token:
        raise ValueError("a lease token is needed: pass a claimed Job or lease_token=")
    return token


def _drop_none(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if v is not None}


_job: Callable[[Any], Job] = Job.from_json


class EnqueueOptions(TypedDict, total=False):
    """How a job is enqueued, beside its type and payload; each may be left out (or None)."""

    priority: str | None
    max_retries: int | None
    run_at: datetime | None
    delay_seconds: float | None
    idempotency_key: str | None
    # While an active job of this type holds the key, no other is made: ``on_duplicate``
    # "keep" (the server's default) answers it, "replace" gives a pending one this payload.
    unique_key: str | None
    on_duplicate: str | None
    group: str | None  # a tenant, an account: what the type's group_concurrency counts by
    # The jobs (or their ids) this one waits for: it is "waiting" until they completed.
    depends_on: Sequence[JobRef] | None
    # "cancel" (the server's default): a dependency that fails cancels this job too;
    # "run": it runs once every dependency has ended, whatever the outcome.
    on_dependency_failure: str | None


class BatchItemOptions(EnqueueOptions, total=False):
    """An ``enqueue_many`` item's options: an enqueue's, and the earlier items it waits for."""

    depends_on_items: Sequence[int] | None  # indices of earlier items of the same batch


def enqueue_body(
    type: str, payload: JsonObject | None = None, **options: Unpack[BatchItemOptions]
) -> JsonObject:
    """The JSON body of one job to enqueue (an item of ``enqueue_many``, which may name
    earlier items by ``depends_on_items``). Without ``idempotency_key`` (or with None) a new
    one is made, so that sending the same body again can never create a second job; one
    given is sent as it is, for the server to check."""
    body: dict[str, Any] = _drop_none({**options})
    if "run_at" in body:
        if not isinstance(at := body["run_at"], datetime):  # a string may be read otherwise
            raise TypeError(f"run_at must be a datetime, not {at.__class__.__name__}")
        body["run_at"] = rfc3339(at)
    if "depends_on" in body:
        body["depends_on"] = [_job_id(job) for job in body["depends_on"]]
    if "depends_on_items" in body:
        body["depends_on_items"] = list(body["depends_on_items"])
    if "idempotency_key" not in body:
        body["idempotency_key"] = new_idempotency_key()
    return {"type": type, "payload": payload if payload is not None else {}, **body}


def enqueue(
    type: str, payload: JsonObject | None = None, **options: Unpack[EnqueueOptions]
) -> Call[Job]:
    """Enqueue one job (``POST /jobs``). Returns the new job, or the existing one when the
    idempotency key was already used for the same request, or when an active job holds
    ``unique_key`` (kept, or given this payload with ``on_duplicate="replace"``)."""
    return enqueue_job(enqueue_body(type, payload, **options))


def enqueue_job(body: JsonObject) -> Call[Job]:
    """``POST /jobs`` of a body made by ``enqueue_body``."""
    produces = Produces((str(body["type"]),))
    return Call("POST", "/jobs", _job, resend=True, json=body, produces=produces)


def _keyed(job: JsonObject) -> JsonObject:
    return {**job, "idempotency_key": new_idempotency_key()}


def enqueue_many(jobs: Iterable[JsonObject]) -> Call[list[Enqueued]]:
    """Enqueue up to 500 jobs at once, all or nothing (``POST /jobs/batch``).

    Each item is an enqueue body (``{"type": ..., "payload": ...}``, see ``enqueue_body``);
    items without an ``idempotency_key`` (or with None) get a new one. An item may wait for
    earlier items: ``enqueue_body("report", depends_on_items=[0, 1])`` (a graph in one request).
    """
    items = [job if job.get("idempotency_key") is not None else _keyed(job) for job in jobs]

    def read(data: Any) -> list[Enqueued]:
        return [Enqueued(Job.from_json(i["job"]), bool(i["created"])) for i in data["jobs"]]

    produces = Produces(tuple(str(i.get("type")) for i in items), batch=True)
    return Call("POST", "/jobs/batch", read, resend=True, json={"jobs": items}, produces=produces)


def get(job_id: JobRef, wait_seconds: float = 0) -> Call[Job]:
    """One job (``GET /jobs/{id}``). With ``wait_seconds`` (up to 30), the server answers
    once the job is completed, failed or cancelled, or when the time is up."""
    params = {"wait_seconds": round(wait_seconds, 3)} if wait_seconds > 0 else {}
    return Call(
        "GET",
        f"/jobs/{_job_id(job_id)}",
        _job,
        resend=True,
        params=params,
        wait_seconds=wait_seconds,
    )


def list_page(
    status: str | None = None,
    type: str | None = None,
    limit: int = 50,
    cursor: str | None = None,
    depends_on: JobRef | None = None,
) -> Call[Page]:
    """One page of jobs, newest first (``GET /jobs``; ``depends_on``: that job's dependents),
    fewer than ``limit`` where 1 MiB of payloads and results ends it: ``next_cursor`` goes on."""
    dependency = _job_id(depends_on) if depends_on is not None else None
    params = _drop_none(
        {"status": status, "type": type, "limit": limit, "cursor": cursor, "depends_on": dependency}
    )

    def read(data: Any) -> Page:
        return Page([Job.from_json(j) for j in data["jobs"]], data.get("next_cursor"))

    return Call("GET", "/jobs", read, resend=True, params=params)


def events_page(
    job_id: JobRef, cursor: str | int | None = None, limit: int | None = None
) -> Call[EventPage]:
    """One page of a job's history, oldest first (``GET /jobs/{id}/events``): the events
    after the event ``cursor`` (a page's ``next_cursor``, or any event's ``id``: the
    last one read, to follow a history), up to ``limit`` (1-500, default 500)."""

    def read(data: Any) -> EventPage:
        events = [Event.from_json(e) for e in data["events"]]
        return EventPage(events, data.get("next_cursor"))

    params = _drop_none({"cursor": cursor, "limit": limit})
    return Call("GET", f"/jobs/{_job_id(job_id)}/events", read, resend=True, params=params)


def dependencies(job_id: JobRef) -> Call[list[Dependency]]:
    """The jobs a job depends on, with their status and result
    (``GET /jobs/{id}/dependencies``): for its producer, an admin, or the worker holding it."""

    def read(data: Any) -> list[Dependency]:
        return [Dependency.from_json(d) for d in data["dependencies"]]

    return Call("GET", f"/jobs/{_job_id(job_id)}/dependencies", read, resend=True)


def cancel(job_id: JobRef) -> Call[Job]:
    """Cancel a waiting or pending job. Sent again after a broken connection: a second delivery can
    only be refused (409), never change anything."""
    return Call("POST", f"/jobs/{_job_id(job_id)}/cancel", _job, resend=True)


def retry(job_id: JobRef) -> Call[Job]:
    """Redrive a failed or cancelled job (admin). Safe to send again, like ``cancel``."""
    return Call("POST", f"/jobs/{_job_id(job_id)}/retry", _job, resend=True)


def claim(
    types: Sequence[str] | None = None,
    limit: int = 1,
    wait_seconds: float = 0,
    lease_seconds: int | None = None,
    instance: str | None = None,
    linger_ms: int = 0,
) -> Call[list[Job]]:
    """Claim up to ``limit`` ready jobs (``POST /jobs/claim``); with ``linger_ms``, a claim
    that holds fewer than ``limit`` goes on taking jobs as they become ready for that long.

    ``types``: only these (None: every type the key may claim; ``[]`` is refused).

    Never sent again once it may have reached the server: if the answer was lost, the jobs
    it claimed are held by nobody who knows their lease tokens, and a second claim would
    not bring them back; they run again when their lease expires.
    """
    body = _drop_none(
        {
            "types": list(types) if types is not None else None,
            "limit": limit,
            "wait_seconds": wait_seconds,
            "lease_seconds": lease_seconds,
            "instance": instance,
            "linger_ms": linger_ms or None,  # unsent at 0: a server before it knows no such field
        }
    )

    def read(data: Any) -> list[Job]:
        return [Job.from_json(j) for j in data["jobs"]]

    waits = wait_seconds + linger_ms / 1000
    return Call("POST", "/jobs/claim", read, resend=False, json=body, wait_seconds=waits)


def heartbeat(
    job: JobRef,
    lease_token: str | None = None,
    lease_seconds: int | None = None,
    progress: JsonObject | None = None,
) -> Call[Job]:
    """Extend the lease of a held job, and give its ``progress`` if any. Safe to send
    again: it only extends the lease and sets the same progress."""
    token = _lease_token(job, lease_token)
    body = _drop_none({"lease_token": token, "lease_seconds": lease_seconds, "progress": progress})
    return Call("POST", f"/jobs/{_job_id(job)}/heartbeat", _job, resend=True, json=body)


def release(
    job: JobRef, *, delay_seconds: float | None = None, lease_token: str | None = None
) -> Call[Job]:
    """Give a held job back unrun: pending again (after ``delay_seconds``, a snooze), its
    attempt not spent. Sent again after a broken connection: the lease token guards it
    (409 if the first landed)."""
    body = _drop_none(
        {"lease_token": _lease_token(job, lease_token), "delay_seconds": delay_seconds}
    )
    return Call("POST", f"/jobs/{_job_id(job)}/release", _job, resend=True, json=body)


def complete(
    job: JobRef, result: JsonObject | None = None, *, lease_token: str | None = None
) -> Call[Job]:
    """Complete a held job. Sent again after a broken connection: the lease token guards it,
    so a second delivery can only be refused (409 ``invalid-state`` if the first landed)."""
    body = _drop_none({"lease_token": _lease_token(job, lease_token), "result": result})
    return Call("POST", f"/jobs/{_job_id(job)}/complete", _job, resend=True, json=body)


def complete_many(
    items: Iterable[Job | tuple[Job, JsonObject | None]], *, return_jobs: bool = True
) -> Call[list[Acknowledged]]:
    """Complete up to 100 held jobs (``POST /jobs/batch/complete``); answered per item.

    With ``return_jobs=False`` the server sends no jobs back (``Prefer: return=minimal``)
    and each answer's ``job`` is None (unless the server ignores the preference): less
    work on both sides for a caller that only needs to know which completions landed.
    """
    body = []
    for item in items:
        job, result = item if isinstance(item, tuple) else (item, None)
        entry = {"id": job.id, "lease_token": _lease_token(job, None), "result": result}
        body.append(_drop_none(entry))

    def read(data: Any) -> list[Acknowledged]:
        return [_acknowledged(r) for r in data["results"]]

    headers = {} if return_jobs else {"Prefer": "return=minimal"}
    return Call(
        "POST", "/jobs/batch/complete", read, resend=True, json={"items": body}, headers=headers
    )


def _acknowledged(data: JsonObject) -> Acknowledged:
    status = int(data["status"])
    job = Job.from_json(data["job"]) if data.get("job") else None
    error = None if status == 200 else error_from_item(status, data.get("type"))
    return Acknowledged(int(data["id"]), status, job, error)


def fail(
    job: JobRef,
    error: str,
    *,
    retryable: bool = True,
    retry_in_seconds: float | None = None,
    lease_token: str | None = None,
) -> Call[Job]:
    """Fail a held job: retried later while attempts remain, unless ``retryable`` is false.
    Safe to send again, like ``complete``."""
    body = _drop_none(
        {
            "lease_token": _lease_token(job, lease_token),
            "error": error,
            "retryable": retryable,
            "retry_in_seconds": retry_in_seconds,
        }
    )
    return Call("POST", f"/jobs/{_job_id(job)}/fail", _job, resend=True, json=body)
