"""The dashboard's schedules page and its pause, resume and trigger forms. Each form goes
through the Scheduler, exactly as the API does, and needs the session's CSRF token."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import RedirectResponse

from queuelog.app_state import state_of
from queuelog.dashboard.web import Admin, DashboardRoute, Posted, render

router = APIRouter(prefix="/ui", route_class=DashboardRoute)

# Fixed texts for ?notice=...: the query string never puts its own words on the page.
NOTICES = {
    "paused": "The schedule is paused: it makes no job until resumed.",
    "resumed": "The schedule is resumed from its next fire time.",
}


@router.get("/schedules")
async def schedules_page(
    request: Request, admin: Admin, notice: Annotated[str | None, Query(max_length=30)] = None
) -> Response:
    state = state_of(request)
    schedules = await state.schedules.list()
    # A schedule whose type left the config skips its fires: say so next to it.
    unconfigured = {s.name for s in schedules if state.settings.job_type(s.spec.type) is None}
    return render(
        request,
        "schedules.html",
        schedules=schedules,
        unconfigured=unconfigured,
        notice=NOTICES.get(notice or ""),
    )


@router.post("/schedules/{name}/pause")
async def pause(request: Request, name: str, posted: Posted) -> Response:
    await state_of(request).schedules.pause(name)
    return RedirectResponse("/ui/schedules?notice=paused", status_code=303)


@router.post("/schedules/{name}/resume")
async def resume(request: Request, name: str, posted: Posted) -> Response:
    await state_of(request).schedules.resume(name)
    return RedirectResponse("/ui/schedules?notice=resumed", status_code=303)


@router.post("/schedules/{name}/trigger")
async def trigger(request: Request, name: str, posted: Posted) -> Response:
    job = await state_of(request).schedules.trigger(name)
    return RedirectResponse(f"/ui/jobs/{job.id}?notice=triggered", status_code=303)
