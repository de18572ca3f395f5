"""Producer-facing routes: enqueue, list, read, cancel, and the admin redrive."""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response

from queuelog.api.answers import (
    BatchEnqueueOut,
    DependenciesOut,
    EventsOut,
    JobListOut,
    JobOut,
    dependency_json,
    event_json,
    job_json,
)
from queuelog.api.deps import Admin, Canceller, Producer, Reader, ServiceDep
from queuelog.api.lean import (
    NO_FIELDS,
    JsonRoute,
    LeanRoute,
    NoFields,
    header_parameters,
    lean_openapi,
    read_request,
)
from queuelog.api.openapi import AUTHED, NO_BODY, located, problems
from queuelog.api.query import DIGITS, SECONDS, OneValueEach
from queuelog.api.responses import JSONResponse
from queuelog.api.results import job_or_wait
from queuelog.api.schemas import (
    IDEMPOTENCY_KEY_PATTERN,
    BatchEnqueueItem,
    BatchEnqueueRequest,
    EnqueueRequest,
    priority_of,
)
from queuelog.api.trace_headers import TRACE_HEADERS, trace_context_of
from queuelog.app_state import IdPath, state_of
from queuelog.errors import Unauthenticated, ValidationFailed
from queuelog.models import MAX_ID, DependencyFailure, JobStatus, OnDuplicate, Role, TraceContext
from queuelog.specs import CURSOR_PATTERN, TYPE_FILTER_PATTERN, EnqueueSpec

router = APIRouter(prefix="/jobs", tags=["jobs"], route_class=JsonRoute)
# The hottest operations: see api/lean.py.
lean = APIRouter(prefix="/jobs", tags=["jobs"], route_class=LeanRoute)


def _spec(
    body: EnqueueRequest, trace: TraceContext | None, header_key: str | None = None
) -> EnqueueSpec:
    key = body.idempotency_key
    if header_key is not None:
        if key is not None and key != header_key:
            raise ValidationFailed(
                "The Idempotency-Key header and the idempotency_key field differ",
                errors=[{"loc": ["header", "Idempotency-Key"], "msg": "differs from the body"}],
            )
        key = header_key
    return EnqueueSpec(
        type=body.type,
        payload=body.payload,
        priority=priority_of(body.priority),
        max_retries=body.max_retries,
        run_at=body.run_at,
        delay_seconds=body.delay_seconds,
        idempotency_key=key,
        unique_key=body.unique_key,
        on_duplicate=OnDuplicate(body.on_duplicate or OnDuplicate.KEEP),
        group=body.group,
        trace_context=trace,
        depends_on=tuple(body.depends_on or ()),
        depends_on_items=tuple(
            (body.depends_on_items or []) if isinstance(body, BatchEnqueueItem) else ()
        ),
        on_dependency_failure=DependencyFailure(
            body.on_dependency_failure or DependencyFailure.CANCEL
        ),
    )


def _check_header_key(values: list[str]) -> str | None:
    # One key per request: with two, a proxy and this server could each read another.
    if len(values) > 1:
        raise ValidationFailed(
            "Send one Idempotency-Key header, not several",
            errors=[{"loc": ["header", "Idempotency-Key"], "msg": "sent more than once"}],
        )
    value = values[0] if values else None
    if value is not None and not re.fullmatch(IDEMPOTENCY_KEY_PATTERN, value):
        raise ValidationFailed(
            "The Idempotency-Key header must be 1-255 printable ASCII characters",
            errors=[{"loc": ["header", "Idempotency-Key"], "msg": "1-255 printable ASCII"}],
        )
    return value


@lean.post(
    "",
    status_code=201,
    response_model=JobOut,
    summary="Enqueue a job",
    description=(
        "201 with the new job and `Location`. With an idempotency key (body field or "
        "`Idempotency-Key` header; both given and different is 422), a repeat of the same "
        "request by the same principal answers 200 with the existing job, unchanged; a "
        "different request with the same key is 422 `idempotency-key-reused`. Keys are "
        "scoped per principal: another producer's key never collides or reveals a job.\n\n"
        "With a `unique_key` (checked after the idempotency key), while a job of this "
        "principal and type holding it is waiting, pending or running: `on_duplicate: keep` "
        "(the default) makes nothing and answers 200 with that job (a waiting or pending one "
        "before a running one); `replace` gives a waiting or pending job this request's "
        "`payload`, `priority` "
        "and `run_at` (200, event `replaced`: a debounce; its other fields, such as "
        "`group`, `max_retries` and `depends_on`, stay as they are), and makes a new job "
        "(201) when the job holding the key is running. Once no such job is waiting, pending or "
        "running, the key is free. Two enqueues of one key at once, on any nodes, make one "
        "job. `on_duplicate` without `unique_key` is 422 `validation`.\n\n"
        "With `depends_on`, the job is `waiting` until its dependencies have ended as "
        "`on_dependency_failure` says; it becomes `pending` in the transaction that ends "
        "the last (event `ready`), its `run_at` then moved up to that time unless it was "
        "later (as a retried job's `run_at` is when it may run again). A dependency "
        "already failed or cancelled, with `cancel`: 201 with the job `cancelled` at once "
        "(event `dependency_failed`)."
    ),
    responses=problems(*AUTHED, 413, 415, 422)
    | {
        201: located("/jobs/{id}"),
        200: {
            **located("/jobs/{id}"),
            "model": JobOut,
            "description": (
                "No job made: the same keyed request repeated, or the active job holding the "
                "`unique_key` (kept, or replaced)."
            ),
        },
    },
    openapi_extra=lean_openapi(
        EnqueueRequest,
        headers=[
            (
                "Idempotency-Key",
                "1-255 printable ASCII, in one header (two are 422); the same as the body's field.",
                {"type": "string", "pattern": IDEMPOTENCY_KEY_PATTERN},
            ),
            *TRACE_HEADERS,
        ],
    ),
)
async def enqueue(request: Request) -> Response:
    caller, body = await read_request(request, EnqueueRequest, (Role.PRODUCER,))
    header_key = _check_header_key(request.headers.getlist("idempotency-key"))
    spec = _spec(body, trace_context_of(request.headers), header_key)
    job, created = await state_of(request).service.enqueue(caller, spec)
    return JSONResponse(
        job_json(job, show_error=caller.has(Role.ADMIN)),
        status_code=201 if created else 200,  # 200: a repeat of the same keyed request
        headers={"Location": f"/jobs/{job.id}"},
    )


@router.post(
    "/batch",
    response_model=BatchEnqueueOut,
    summary="Enqueue up to 500 jobs, all or nothing",
    description=(
        "One bad item rejects the whole batch with 422 naming its `index`. Items take "
        "`unique_key` and `on_duplicate` as a single enqueue does, in order: a later item "
        "meets an earlier one's key, and items that met one job all answer with it as the "
        "batch left it. `created` is false for an item that made no job. An "
        "item may wait for earlier items with `depends_on_items` (their indices), beside "
        "`depends_on`: a whole graph in one request. A batch is made safe to resend by "
        "each item's own `idempotency_key` (as the SDK's `enqueue_many` gives every job "
        "one); an `Idempotency-Key` header is 422 `validation`, since a key for the whole "
        "batch would not be kept."
    ),
    responses=problems(*AUTHED, 413, 415, 422),
    openapi_extra={"parameters": header_parameters(TRACE_HEADERS)},
)
async def enqueue_batch(
    request: Request, body: BatchEnqueueRequest, caller: Producer, service: ServiceDep
) -> Response:
    if "idempotency-key" in request.headers:
        raise ValidationFailed(
            "A batch takes each item's idempotency_key, not an Idempotency-Key header",
            errors=[{"loc": ["header", "Idempotency-Key"], "msg": "not read by a batch"}],
        )
    trace = trace_context_of(request.headers)  # the request's: every job of it shares it
    specs = [_spec(item, trace) for item in body.jobs]
    results = await service.enqueue_many(caller, specs, batch=True)
    admin = caller.has(Role.ADMIN)
    items = [{"job": job_json(job, admin), "created": created} for job, created in results]
    return JSONResponse({"jobs": items})


@router.get(
    "",
    response_model=JobListOut,
    summary="List jobs, newest first",
    description=(
        "A producer sees the jobs its principal enqueued, a worker the jobs it holds now, an "
        "admin all. A page holds up to `limit` jobs, and fewer once their payloads, results, "
        "progress and errors reach 1 MiB (one job at least, however large), so a page may "
        "hold fewer than `limit` jobs while more follow. Pass `next_cursor` back as `cursor` "
        "for the next page; it is null after the last."
    ),
    responses=problems(*AUTHED, 422),
)
async def list_jobs(
    caller: Reader,
    _once: OneValueEach,
    service: ServiceDep,
    status: JobStatus | None = None,
    type: Annotated[str | None, Query(pattern=TYPE_FILTER_PATTERN)] = None,
    limit: Annotated[int, Query(ge=1, le=500), DIGITS] = 50,
    cursor: Annotated[
        str | None,
        Query(pattern=CURSOR_PATTERN, description="A page's `next_cursor`: a job id."),
    ] = None,
    depends_on: Annotated[
        int | None,
        Query(ge=1, le=MAX_ID, description="Only the jobs that depend on this job."),
        DIGITS,
    ] = None,
) -> Response:
    jobs, next_cursor = await service.list_jobs(
        caller, limit, cursor, status, type, depends_on=depends_on
    )
    admin = caller.has(Role.ADMIN)
    return JSONResponse({"jobs": [job_json(j, admin) for j in jobs], "next_cursor": next_cursor})


@router.get(
    "/{job_id:id}",
    response_model=JobOut,
    summary="Get one job, or await its result",
    description=(
        "With `wait_seconds` (0-30, default 0), a job that is not yet completed, failed or "
        "cancelled is awaited: the answer comes as soon as the job finishes (on any node), "
        "or when the time is up, with the job as it is then (still `pending` or `running`). "
        "A finished job is answered at once. A job the caller may not see is 404 at once, "
        "as without `wait_seconds` (a worker sees only the jobs it holds, so one that awaits "
        "its own held job is answered 404 once the job has ended). A `wait_seconds` out of "
        "range is 422 `validation`. A key revoked while the request waited is answered 401. "
        "A node shutting down (SIGTERM) answers at once, as when the time is up: a job not "
        "finished is read again, from any node."
    ),
    responses=problems(*AUTHED, 404, 422),
)
async def get_job(
    request: Request,
    job_id: IdPath,
    caller: Reader,
    _once: OneValueEach,
    wait_seconds: Annotated[
        float,
        Query(
            ge=0,
            le=30,
            allow_inf_nan=False,
            description="Await the job's end up to this many seconds (0: answer at once).",
        ),
        SECONDS,
    ] = 0,
) -> Response:
    state = state_of(request)
    job = await job_or_wait(
        state.service, state.finishes, caller, job_id, wait_seconds, request.receive
    )
    if wait_seconds and not await state.keys.still_active(caller):  # revoked meanwhile
        raise Unauthenticated("A valid API key is required")
    return JSONResponse(job_json(job, show_error=caller.has(Role.ADMIN)))


@router.get(
    "/{job_id:id}/events",
    response_model=EventsOut,
    summary="A job's history, oldest first",
    description=(
        "A page of up to `limit` events (1-500, default 500), oldest first. A job's history "
        "has no bound (each retry, release or replace adds to it): while there is more, "
        "`next_cursor` names the page's last event; pass it back as `cursor` for the next "
        "page. A `cursor` may be any event's `id`: the page holds the events after it, so a "
        "client that follows a history asks again with the last `id` it read. A `limit` out "
        "of range or a `cursor` that is not an id is 422 `validation`."
    ),
    responses=problems(*AUTHED, 404, 422),
)
async def job_events(
    job_id: IdPath,
    caller: Reader,
    _once: OneValueEach,
    service: ServiceDep,
    limit: Annotated[int, Query(ge=1, le=500), DIGITS] = 500,
    cursor: Annotated[
        str | None,
        Query(pattern=CURSOR_PATTERN, description="An event's `id` (a page's `next_cursor`)."),
    ] = None,
) -> Response:
    events, next_cursor = await service.events(caller, job_id, limit, cursor)
    admin = caller.has(Role.ADMIN)
    shown = [event_json(e, admin) for e in events]
    return JSONResponse({"events": shown, "next_cursor": next_cursor})


@router.get(
    "/{job_id:id}/dependencies",
    response_model=DependenciesOut,
    summary="The jobs a job depends on, with what they produced",
    description=(
        "For the owning producer, an admin, or the worker holding the job (who sees these "
        "dependencies though it does not hold them): each dependency's `id`, `type`, "
        "`status` and `result`, in the order the job named them. A dependency removed by "
        "retention is left out (retention keeps it while the job is waiting, pending or "
        "running)."
    ),
    responses=problems(*AUTHED, 404),
)
async def job_dependencies(job_id: IdPath, caller: Reader, service: ServiceDep) -> Response:
    found = await service.dependencies(caller, job_id)
    return JSONResponse({"dependencies": [dependency_json(job) for job in found]})


@router.post(
    "/{job_id:id}/cancel",
    **NO_FIELDS,
    response_model=JobOut,
    summary="Cancel a waiting or pending job (owning producer or admin)",
    responses=problems(*AUTHED, 404, 409, *NO_BODY),
)
async def cancel_job(
    job_id: IdPath, caller: Canceller, service: ServiceDep, _fields: NoFields
) -> Response:
    job = await service.cancel(caller, job_id)
    return JSONResponse(job_json(job, show_error=caller.has(Role.ADMIN)))


@router.post(
    "/{job_id:id}/retry",
    **NO_FIELDS,
    response_model=JobOut,
    summary="Redrive a failed or cancelled job (admin)",
    description=(
        "`failed` or `cancelled` -> `pending` with `retry_count = 0` and `run_at = now`; a "
        "job with dependencies -> `waiting` until they have ended as it needs (at once "
        "`ready` if they have; a dependency it needs that failed or was cancelled keeps it "
        "waiting until that one is redriven too). The jobs that its failure cancelled (event "
        "`dependency_failed`) wait again, recursively (event `requeued`), and so do the "
        "`run`-mode dependents of these jobs that their end made `pending` and that no "
        "worker has held yet; one a worker held (even if it snoozed) is left alone. A job "
        "brought back whose `unique_key` a newer job holds by now comes back all the same, "
        "beside it (an explicit act): enqueues with the key then meet the newest waiting or "
        "pending one."
    ),
    responses=problems(
        *AUTHED,
        404,
        409,
        *NO_BODY,
        described={
            422: "`unknown-job-type`: the job's type is no longer in the config, so no "
            "worker could claim it once pending (nothing changes); `validation`: a body "
            "other than none or `{}`."
        },
    ),
)
async def retry_job(
    job_id: IdPath, caller: Admin, service: ServiceDep, _fields: NoFields
) -> Response:
    job = await service.redrive.job(caller, job_id)
    return JSONResponse(job_json(job, show_error=True))
