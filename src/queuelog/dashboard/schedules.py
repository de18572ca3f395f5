"""The dashboard's schedules page and its pause, resume and trigger forms. Each form goes
through the Scheduler, exactly as the API does, and needs the session's CSRF token."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from queuelog.app_state import state_of
from queuelog.dashboard.web import Admin, DashboardRoute, Posted, render, see

router = APIRouter(prefix="/ui", route_class=DashboardRoute)


@router.get("/schedules")
async def schedules_page(request: Request, admin: Admin) -> Response:
    state = state_of(request)
    schedules = await state.schedules.list()
    # A schedule whose type left the config skips its fires: say so next to it.
    unconfigured = {s.name for s in schedules if state.settings.job_type(s.spec.type) is None}
    return render(
        request,
        "schedules.html",
        schedules=schedules,
        unconfigured=unconfigured,
    )


@router.post("/schedules/{name}/pause")
async def pause(request: Request, name: str, posted: Posted) -> Response:
    await state_of(request).schedules.pause(name)
    return see(request, "/ui/schedules", "The schedule is paused: it makes no job until resumed.")


@router.post("/schedules/{name}/resume")
async def resume(request: Request, name: str, posted: Posted) -> Response:
    await state_of(request).schedules.resume(name)
    return see(request, "/ui/schedules", "The schedule is resumed from its next fire time.")


@router.post("/schedules/{name}/trigger")
async def trigger(request: Request, name: str, posted: Posted) -> Response:
    job = await state_of(request).schedules.trigger(name)
    return see(request, f"/ui/jobs/{job.id}", "The schedule made this job now.")
