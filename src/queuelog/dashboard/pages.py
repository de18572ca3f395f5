"""The dashboard's read-only pages: overview, jobs, one job, keys, confirmations."""

from __future__ import annotations

import secrets
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response

from queuelog.app_state import IdPath, state_of
from queuelog.dashboard import views
from queuelog.dashboard.web import (
    ID_FILTER,
    KEY_FILTER,
    TYPE_FILTER,
    Admin,
    DashboardRoute,
    now_of,
    render,
)
from queuelog.errors import NotFound, ValidationFailed, quoted
from queuelog.models import JobStatus, Role
from queuelog.specs import TYPE_FILTER_PATTERN

router = APIRouter(prefix="/ui", route_class=DashboardRoute)

PAGE_SIZE = 50
LEASED_SHOWN = 100
DEPENDENTS_SHOWN = 100  # a fan-out may have thousands: the rest are a filtered list away
EVENTS_SHOWN = 100  # a page of a job's history, which has no bound


@router.get("")
@router.get("/")
async def overview(request: Request, admin: Admin) -> Response:
    state = state_of(request)
    service = state.service
    stats = await service.stats()
    now = now_of(request)
    leased, _ = await service.list_jobs(admin.key, LEASED_SHOWN, status=JobStatus.RUNNING)
    oldest = stats.oldest_ready_at
    return render(
        request,
        "overview.html",
        totals=views.status_totals(stats.counts),
        by_type=views.by_type(stats.counts),
        ready=stats.ready,
        oldest_age=(now - oldest).total_seconds() if oldest else None,
        chart=views.throughput_chart(await state.chart.slots()),
        leased=leased,
    )


def _status(value: str | None) -> JobStatus | None:
    if not value:
        return None
    try:
        return JobStatus(value)
    except ValueError:
        raise ValidationFailed(f"Unknown status {quoted(value)}") from None


@router.get("/jobs")
async def jobs(
    request: Request,
    admin: Admin,
    status: Annotated[str | None, Query(max_length=20)] = None,
    job_type: Annotated[str | None, Query(alias="type", pattern=TYPE_FILTER)] = None,
    idempotency_key: Annotated[str | None, Query(pattern=KEY_FILTER)] = None,
    cursor: Annotated[str | None, Query(max_length=100)] = None,
    depends_on: Annotated[str | None, Query(pattern=ID_FILTER)] = None,
) -> Response:
    service = state_of(request).service
    found, next_cursor = await service.list_jobs(
        admin.key,
        PAGE_SIZE,
        cursor=cursor or None,
        status=_status(status),
        job_type=job_type or None,
        idempotency_key=idempotency_key or None,
        depends_on=int(depends_on) if depends_on else None,
    )
    filters = {
        "status": status or "",
        "type": job_type or "",
        "idempotency_key": idempotency_key or "",
        "depends_on": str(depends_on or ""),
    }
    return render(
        request,
        "jobs.html",
        jobs=found,
        next_cursor=next_cursor,
        filters=filters,
        statuses=views.STATUSES,
        types=sorted(service.settings.types),
        first_page=not cursor,
    )


@router.get("/jobs/{job_id:id}")
async def job(
    request: Request,
    admin: Admin,
    job_id: IdPath,
    events_cursor: Annotated[str | None, Query(max_length=100)] = None,
) -> Response:
    service = state_of(request).service
    found = await service.get(admin.key, job_id)
    dependents, more = await service.list_jobs(admin.key, DEPENDENTS_SHOWN, depends_on=job_id)
    events, later = await service.events(admin.key, job_id, EVENTS_SHOWN, events_cursor or None)
    return render(
        request,
        "job.html",
        job=found,
        events=events,
        later_events=later,
        first_events=not events_cursor,
        dependencies=await service.dependencies(admin.key, job_id),
        dependents=dependents,
        more_dependents=more is not None,
    )


@router.get("/retry-failed")
async def confirm_retry_failed(
    request: Request,
    admin: Admin,
    job_type: Annotated[str, Query(alias="type", pattern=TYPE_FILTER_PATTERN)],
) -> Response:
    counts = (await state_of(request).service.stats()).counts
    count = counts.get(("failed", job_type), 0)
    return render(request, "retry_failed.html", job_type=job_type, count=count)


@router.get("/types")
async def types(request: Request, admin: Admin) -> Response:
    states = await state_of(request).service.flow.list_types()
    return render(request, "types.html", types=states)


@router.get("/keys")
async def keys(request: Request, admin: Admin) -> Response:
    return render(request, "keys.html", 200, **(await key_page(request)))


async def key_page(request: Request) -> dict[str, object]:
    state = state_of(request)
    keys = await state.keys.list()
    admins = [k.id for k in keys if k.revoked_at is None and k.has(Role.ADMIN)]
    return {
        "keys": sorted(keys, key=lambda k: (k.revoked_at is not None, -k.id)),
        # Its revoke asks twice as loudly: no admin could sign in or call the API after.
        "last_admin_id": admins[0] if len(admins) == 1 else None,
        "types": sorted(state.service.settings.types),
        "roles": ["producer", "worker", "admin"],
        "priorities": ["low", "medium", "high", "critical"],
        "created": None,
        "plaintext": None,
        "form_error": None,
        "form_id": secrets.token_urlsafe(16),  # each create-key form makes one key
    }


@router.post("/jobs/{job_id}/{action}")
@router.post("/keys/{key_id}/revoke")
@router.get("/{path:path}")
def unknown(request: Request, path: str = "") -> Response:
    """Anything else under /ui, or a job's or key's form for no id: an HTML 404 with the
    dashboard's headers."""
    raise NotFound("No such page")
