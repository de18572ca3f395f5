"""Producer-facing routes: enqueue, list, read, cancel, and the admin redrive."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response

from queuelog.api.deps import Admin, Canceller, Producer, Reader, ServiceDep
from queuelog.api.lean import LeanRoute, lean_openapi, read_request
from queuelog.api.openapi import AUTHED, problems
from queuelog.api.responses import JSONResponse
from queuelog.api.schemas import (
    BatchEnqueueOut,
    BatchEnqueueRequest,
    EnqueueRequest,
    EventsOut,
    JobListOut,
    JobOut,
    event_json,
    job_json,
    priority_of,
)
from queuelog.app_state import IdPath, state_of
from queuelog.errors import ValidationFailed
from queuelog.models import JobStatus, Role
from queuelog.specs import EnqueueSpec

router = APIRouter(prefix="/jobs", tags=["jobs"])
# The hottest operations: see api/lean.py.
lean = APIRouter(prefix="/jobs", tags=["jobs"], route_class=LeanRoute)


def _spec(body: EnqueueRequest, header_key: str | None = None) -> EnqueueSpec:
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
        group=body.group,
    )


def _check_header_key(value: str | None) -> str | None:
    if value is not None and not (
        1 <= len(value) <= 255 and value.isascii() and value.isprintable()
    ):
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
        "scoped per principal: another producer's key never collides or reveals a job."
    ),
    responses=problems(*AUTHED, 413, 415, 422)
    | {200: {"model": JobOut, "description": "Same key, same request."}},
    openapi_extra=lean_openapi(
        EnqueueRequest,
        headers=[("Idempotency-Key", "1-255 printable ASCII; the same as the body's field.")],
    ),
)
async def enqueue(request: Request) -> Response:
    caller, body = await read_request(request, EnqueueRequest, (Role.PRODUCER,))
    spec = _spec(body, _check_header_key(request.headers.get("idempotency-key")))
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
    description="One bad item rejects the whole batch with 422 naming its `index`.",
    responses=problems(*AUTHED, 413, 415, 422),
)
async def enqueue_batch(
    body: BatchEnqueueRequest, caller: Producer, service: ServiceDep
) -> Response:
    specs = [_spec(item) for item in body.jobs]
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
        "admin all. Pass `next_cursor` back as `cursor` for the next page."
    ),
    responses=problems(*AUTHED, 422),
)
async def list_jobs(
    caller: Reader,
    service: ServiceDep,
    status: JobStatus | None = None,
    type: Annotated[str | None, Query(max_length=100)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Annotated[str | None, Query(max_length=100)] = None,
) -> Response:
    jobs, next_cursor = await service.list_jobs(caller, limit, cursor, status, type)
    admin = caller.has(Role.ADMIN)
    return JSONResponse({"jobs": [job_json(j, admin) for j in jobs], "next_cursor": next_cursor})


@router.get(
    "/{job_id:int}",
    response_model=JobOut,
    summary="Get one job",
    responses=problems(*AUTHED, 404),
)
async def get_job(job_id: IdPath, caller: Reader, service: ServiceDep) -> Response:
    job = await service.get(caller, job_id)
    return JSONResponse(job_json(job, show_error=caller.has(Role.ADMIN)))


@router.get(
    "/{job_id:int}/events",
    response_model=EventsOut,
    summary="A job's history, oldest first",
    responses=problems(*AUTHED, 404),
)
async def job_events(job_id: IdPath, caller: Reader, service: ServiceDep) -> Response:
    events = await service.events(caller, job_id)
    admin = caller.has(Role.ADMIN)
    return JSONResponse({"events": [event_json(e, admin) for e in events]})


@router.post(
    "/{job_id:int}/cancel",
    response_model=JobOut,
    summary="Cancel a pending job (owning producer or admin)",
    responses=problems(*AUTHED, 404, 409),
)
async def cancel_job(job_id: IdPath, caller: Canceller, service: ServiceDep) -> Response:
    job = await service.cancel(caller, job_id)
    return JSONResponse(job_json(job, show_error=caller.has(Role.ADMIN)))


@router.post(
    "/{job_id:int}/retry",
    response_model=JobOut,
    summary="Redrive a failed or cancelled job (admin)",
    description="`failed` or `cancelled` -> `pending` with `retry_count = 0` and `run_at = now`.",
    responses=problems(*AUTHED, 404, 409),
)
async def retry_job(job_id: IdPath, caller: Admin, service: ServiceDep) -> Response:
    job = await service.retry(caller, job_id)
    return JSONResponse(job_json(job, show_error=True))
