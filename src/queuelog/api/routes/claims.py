"""Worker routes: claim, heartbeat, complete, fail, and batch acknowledgement."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from fastapi import APIRouter, Request, Response

from queuelog.api.answers import BatchCompleteOut, ClaimOut, JobOut, job_json
from queuelog.api.claiming import claim_or_wait
from queuelog.api.deps import ServiceDep, Worker
from queuelog.api.lean import JsonRoute, LeanRoute, lean_openapi, read_request
from queuelog.api.openapi import AUTHED, problems
from queuelog.api.responses import JSONResponse
from queuelog.api.schemas import (
    BatchCompleteRequest,
    ClaimRequest,
    CompleteRequest,
    FailRequest,
    HeartbeatRequest,
    ReleaseRequest,
)
from queuelog.app_state import IdPath, state_of
from queuelog.errors import QueueError
from queuelog.models import Finished, Job, Role
from queuelog.specs import FinishSpec

router = APIRouter(prefix="/jobs", tags=["workers"], route_class=JsonRoute)
# The hottest operations: see api/lean.py.
lean = APIRouter(prefix="/jobs", tags=["workers"], route_class=LeanRoute)

_HELD = (
    " 404 if there is no such job; 409 `invalid-state` if it is not running; 409 "
    "`not-lease-holder` if another worker holds it, the lease token is stale, or the lease "
    "has passed its deadline (even before the sweeper has rescued the job). "
    "Nothing changes on a 409."
)


@lean.post(
    "/claim",
    response_model=ClaimOut,
    summary="Claim ready jobs",
    description=(
        "Atomic: each job is handed to exactly one claimer. Eligible jobs are pending with "
        "`run_at <= now`, in order `priority DESC, created_at ASC, id ASC`. Expired leases "
        "are rescued first. `worker_id` is the key's name, or `name/instance`; the caller "
        "never chooses it. `{}` claims one job of any type the key may claim. "
        "Flow control: a job whose type is paused or at its `concurrency`, whose group is "
        "at the type's `group_concurrency`, or whose type has used its `rate_limit` window "
        "is skipped, not failed and not reordered; the claim takes the next eligible jobs. "
        "The limits hold across every worker and node. "
        "With `wait_seconds`, an empty queue is long-polled: the answer comes as soon as "
        "a matching job is ready (enqueued, retried, redriven or its `run_at` reached), a "
        "running job of a limited type ends, a paused type is resumed or a rate window "
        'reopens, or `{"jobs": []}` when the time is up. '
        "With `linger_ms` (0-1,000, default 0), a claim that holds at least one job but "
        "fewer than `limit` goes on taking jobs as they become ready, for that long after "
        "its first, but never past a third of a held job's lease, then answers with all it "
        "holds (as a Kafka consumer's `fetch.max.wait.ms`): a stream of jobs is claimed, and "
        "then acknowledged, in fewer requests, each job waiting at most that long for its "
        "worker. A client that hangs up while its claim lingers gets nothing, and the jobs "
        "held for it are released at once (event `released`, the attempt not spent); if "
        "taking more fails, or the server shuts down, the claim answers with what it holds. "
        "A claim whose key is revoked while it waits or lingers answers 401, the jobs it "
        "held released; one whose key cannot be read again releases them and answers 503, "
        "unless they cannot be released either (the database away): then it answers with "
        "them, rather than leave them leased to nobody."
    ),
    responses=problems(*AUTHED, 413, 415, 422),
    openapi_extra=lean_openapi(ClaimRequest),
)
async def claim(request: Request) -> Response:
    caller, body = await read_request(request, ClaimRequest, (Role.WORKER,))
    state = state_of(request)
    jobs = await claim_or_wait(
        state.service, state.wakeup, state.keys, caller, body, request.receive
    )
    admin = caller.has(Role.ADMIN)
    return JSONResponse({"jobs": [job_json(j, admin, lease_token=True) for j in jobs]})


_PREFER = (
    "RFC 7240 preferences. `return=minimal` answers each completed item as "
    '`{"id", "status": 200}` without its job (and says so in `Preference-Applied`): '
    "for a worker that has no use for the jobs, the server sends none of them and "
    "decodes none of them from the database."
)


@lean.post(
    "/batch/complete",
    response_model=BatchCompleteOut,
    summary="Complete up to 100 held jobs at once",
    description=(
        "Each item is checked exactly as the single route and answered in order. "
        "A completed item carries the job, unless the request says `Prefer: return=minimal`."
    ),
    responses={
        200: {
            "description": "One result per item, in order.",
            "headers": {
                "Preference-Applied": {
                    "description": "`return=minimal` when the request preferred it.",
                    "schema": {"type": "string"},
                }
            },
        },
        **problems(*AUTHED, 413, 415, 422),
    },
    openapi_extra=lean_openapi(
        BatchCompleteRequest, headers=[("prefer", _PREFER, {"type": "string"})]
    ),
)
async def complete_batch(request: Request) -> Response:
    caller, body = await read_request(request, BatchCompleteRequest, (Role.WORKER,))
    minimal = prefers_minimal(request.headers.getlist("prefer"))
    specs = [FinishSpec(i.id, i.lease_token, result=i.result) for i in body.items]
    outcomes = await state_of(request).service.finish_many(caller, specs, with_jobs=not minimal)
    admin = caller.has(Role.ADMIN)
    results = [_item(spec.job_id, out, admin) for spec, out in zip(specs, outcomes, strict=True)]
    headers = {"Preference-Applied": "return=minimal"} if minimal else None
    return JSONResponse({"results": results}, headers=headers)


# RFC 7240: a Prefer header is a comma-separated list of preferences, each
# ``token [= word] *(; parameter)``, where a word may be a quoted string (which may
# hold commas and semicolons).
_QUOTED = r'"(?:[^"\\]|\\.)*"'
# One list item, a quoted string kept whole (an unclosed one runs to the end): every
# character is read once, whatever the header holds.
_PREFERENCE = re.compile(r'(?:[^,"]|"(?:[^"\\]|\\.)*"?)+')
_RETURN = re.compile(r"\s*return\s*(?:[=;]|$)", re.IGNORECASE)
_MINIMAL = re.compile(rf"\s*(?i:return)\s*=\s*(minimal|{_QUOTED})\s*(?:;.*)?", re.DOTALL)


def prefers_minimal(values: Iterable[str]) -> bool:
    """Whether ``Prefer`` header values (RFC 7240) ask for ``return=minimal``; the first
    ``return`` preference is the one that counts, as the RFC says of a repeated one."""
    for value in values:
        for preference in _PREFERENCE.findall(value):
            if not _RETURN.match(preference):
                continue
            said = _MINIMAL.fullmatch(preference)
            word = said[1] if said else ""
            if word.startswith('"'):
                word = re.sub(r"\\(.)", r"\1", word[1:-1])
            return word == "minimal"
    return False


def _item(job_id: IdPath, outcome: Job | Finished | QueueError, admin: bool) -> dict[str, Any]:
    if isinstance(outcome, QueueError):
        return {"id": job_id, "status": outcome.status, "type": outcome.slug}
    if isinstance(outcome, Finished):
        return {"id": job_id, "status": 200}
    return {"id": job_id, "status": 200, "job": job_json(outcome, admin)}


@router.post(
    "/{job_id:id}/heartbeat",
    response_model=JobOut,
    summary="Extend the lease of a held job",
    description=(
        "The lease ends `lease_seconds` from now (else the lease last asked for, by the claim "
        "or a heartbeat, else the type's). `progress` (a JSON object, at most 4,096 bytes as "
        "compact UTF-8 JSON) becomes the job's `progress`, shown until the next one and "
        "after the job ends; a heartbeat without it keeps the last one." + _HELD
    ),
    responses=problems(
        *AUTHED,
        404,
        409,
        413,
        415,
        422,
        described={
            422: "`validation`, or `payload-too-large`: `progress` exceeds 4,096 bytes.",
        },
    ),
)
async def heartbeat(
    job_id: IdPath, body: HeartbeatRequest, caller: Worker, service: ServiceDep
) -> Response:
    job = await service.heartbeat(
        caller, job_id, body.lease_token, body.lease_seconds, body.progress
    )
    return JSONResponse(job_json(job, caller.has(Role.ADMIN)))


@router.post(
    "/{job_id:id}/release",
    response_model=JobOut,
    summary="Give a held job back unrun, now or after a delay (snooze)",
    description=(
        "Back to `pending` at `run_at = now + delay_seconds` (0-86,400, default 0), its "
        "lease ended and `retry_count` unchanged: the attempt is not spent, as with "
        "beanstalkd's `release`. Event `released`. For a worker that claimed a job it will "
        "not run now: stopping before it started, or a partner that said 429 (the SDK's "
        "`raise Snooze(seconds)`). Its slot of the type's limits is free at once. A "
        "`delay_seconds` out of range is 422 `validation`." + _HELD
    ),
    responses=problems(*AUTHED, 404, 409, 413, 415, 422),
)
async def release(
    job_id: IdPath, body: ReleaseRequest, caller: Worker, service: ServiceDep
) -> Response:
    job = await service.release(caller, job_id, body.lease_token, float(body.delay_seconds))
    return JSONResponse(job_json(job, caller.has(Role.ADMIN)))


@router.post(
    "/{job_id:id}/complete",
    response_model=JobOut,
    summary="Complete a held job",
    description="`result` is at most `max_result_bytes` serialised (422)." + _HELD,
    responses=problems(*AUTHED, 404, 409, 413, 415, 422),
)
async def complete(
    job_id: IdPath, body: CompleteRequest, caller: Worker, service: ServiceDep
) -> Response:
    spec = FinishSpec(job_id, body.lease_token, result=body.result)
    job = await service.finish(caller, spec)
    return JSONResponse(job_json(job, caller.has(Role.ADMIN)))


@router.post(
    "/{job_id:id}/fail",
    response_model=JobOut,
    summary="Fail a held job (retried while attempts remain)",
    description=(
        "With `retryable` (default) and `retry_count < max_retries`: back to pending with "
        "`retry_count + 1` and `run_at = now + backoff` (or `retry_in_seconds`). Else failed; "
        "`retry_count` stays as it was. The error text is sanitised before it is stored: "
        "credentials, tokens, keys and absolute paths are redacted, control characters "
        "removed, and the text cut to 2,000 characters; a word the cut runs through becomes "
        "`[cut]`, since what is left of a secret may no longer look like one (a text that "
        "is one unbroken word past the limit is stored as `[cut]` alone). A text over "
        "16 KiB is refused (422)." + _HELD
    ),
    responses=problems(*AUTHED, 404, 409, 413, 415, 422),
)
async def fail(job_id: IdPath, body: FailRequest, caller: Worker, service: ServiceDep) -> Response:
    spec = FinishSpec(
        job_id,
        body.lease_token,
        error=body.error,
        retryable=body.retryable,
        retry_in_seconds=body.retry_in_seconds,
    )
    job = await service.finish(caller, spec)
    return JSONResponse(job_json(job, caller.has(Role.ADMIN)))
