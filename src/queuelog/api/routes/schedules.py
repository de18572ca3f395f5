"""Schedules: recurring jobs (admin). The rules are the Scheduler's."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, StrictStr

from queuelog.api.answers import JobOut, job_json
from queuelog.api.deps import Admin
from queuelog.api.lean import NO_FIELDS, JsonRoute, NoFields
from queuelog.api.openapi import AUTHED, NO_BODY, located, problems
from queuelog.api.schemas import CRON_FIVE_FIELDS, EverySeconds, JsonObject, Label, PriorityLabel
from queuelog.app_state import state_of
from queuelog.clock import rfc3339
from queuelog.config import ScheduleConfig
from queuelog.scheduler import Scheduler
from queuelog.schedules import PUBLISHED_SCHEDULE_NAME, ZONES, Schedule

router = APIRouter(prefix="/schedules", tags=["schedules"], route_class=JsonRoute)


async def _scheduler(request: Request) -> Scheduler:
    return state_of(request).schedules


SchedulerDep = Annotated[Scheduler, Depends(_scheduler)]


class ScheduleCreateRequest(ScheduleConfig):
    """A schedule to create: ``cron`` (five fields) or ``every_seconds``, not both."""

    # The published schema says what Cadence.parse checks but the range of each cron
    # field: exactly one of cron and every_seconds, five fields, a known time zone.
    model_config = ConfigDict(
        json_schema_extra={
            "oneOf": [
                {"required": ["cron"], "properties": {"cron": {"type": "string"}}},
                {
                    "required": ["every_seconds"],
                    "properties": {"every_seconds": {"type": "integer"}},
                },
            ]
        }
    )

    name: Annotated[
        StrictStr,
        Field(pattern=PUBLISHED_SCHEDULE_NAME, description="Neither `.` nor `..`."),
    ]
    cron: Annotated[StrictStr, Field(pattern=CRON_FIVE_FIELDS, max_length=200)] | None = None
    every_seconds: EverySeconds | None = None
    timezone: Annotated[StrictStr, Field(json_schema_extra={"enum": sorted(ZONES)})] = "UTC"
    payload: JsonObject = Field(default_factory=dict)
    priority: Label = "low"  # one of the labels, case-insensitive


class ScheduleOut(BaseModel):
    name: str
    cron: str | None
    every_seconds: int | None
    timezone: str
    type: str
    payload: JsonObject
    priority: PriorityLabel
    overlap: bool
    paused: bool
    source: str = Field(description="`config` (from the config file) or `api`.")
    next_run_at: str = Field(
        description="When it fires next; while paused, when it would fire next if resumed "
        "now (fires missed while paused are not made up)."
    )
    last_run_at: str | None = Field(description="The fire time of the last fire taken.")
    last_job_id: int | None
    jobs_made: int = Field(description="Jobs this schedule made (fires and triggers).")
    fires_skipped: int = Field(
        description="Fires that made no job: overlap false while the last job was pending or "
        "running, or a job the intake of every node refused (its type left the config; a "
        "node that refuses it leaves the fire to the others for three sweep intervals)."
    )


class ScheduleListOut(BaseModel):
    schedules: list[ScheduleOut]


def schedule_json(schedule: Schedule) -> dict[str, Any]:
    spec = schedule.spec
    return {
        "name": spec.name,
        "cron": spec.cadence.cron,
        "every_seconds": spec.cadence.every_seconds,
        "timezone": spec.cadence.timezone,
        "type": spec.type,
        "payload": spec.payload,
        "priority": spec.priority.label,
        "overlap": spec.overlap,
        "paused": schedule.paused,
        "source": schedule.source,
        "next_run_at": rfc3339(schedule.next_run_at),
        "last_run_at": rfc3339(schedule.last_run_at) if schedule.last_run_at else None,
        "last_job_id": schedule.last_job_id,
        "jobs_made": schedule.jobs_made,
        "fires_skipped": schedule.fires_skipped,
    }


_NOT_FOUND = {404: "`not-found`: no such schedule."}


def _problems(
    *statuses: int, described: dict[int, str] | None = None
) -> dict[int | str, dict[str, Any]]:
    """``problems`` in this router's own words (404 is always a missing schedule)."""
    answers = problems(*statuses)
    for status, text in (_NOT_FOUND | (described or {})).items():
        if status in answers:
            answers[status] = {**answers[status], "description": text}
    return answers


@router.post(
    "",
    status_code=201,
    response_model=ScheduleOut,
    summary="Create a schedule (admin)",
    description="It first fires at its cadence's next time after now (`every_seconds`: the "
    "next multiple of the interval since the Unix epoch). Should the config file later "
    "name a schedule of the same name, the file's takes this one over when a node starts "
    "(its pause state kept, and its next run unless its cadence changed), and the node "
    "logs a warning.",
    responses=_problems(
        *AUTHED,
        409,
        413,
        415,
        422,
        described={
            409: "`invalid-state`: a schedule of that name exists.",
            422: "`validation` (a bad name, cron or timezone; both or neither of `cron` and "
            "`every_seconds`), `unknown-job-type`, or `payload-too-large`.",
        },
    )
    | {201: located("/schedules/{name}")},
)
async def create_schedule(
    body: ScheduleCreateRequest, _: Admin, scheduler: SchedulerDep
) -> Response:
    schedule = await scheduler.create(scheduler.spec(body.name, body))
    headers = {"Location": f"/schedules/{schedule.name}"}
    return JSONResponse(schedule_json(schedule), status_code=201, headers=headers)


@router.get(
    "",
    response_model=ScheduleListOut,
    summary="List schedules (admin)",
    responses=problems(*AUTHED),
)
async def list_schedules(_: Admin, scheduler: SchedulerDep) -> Response:
    return JSONResponse({"schedules": [schedule_json(s) for s in await scheduler.list()]})


@router.get(
    "/{name}",
    response_model=ScheduleOut,
    summary="One schedule (admin)",
    responses=_problems(*AUTHED, 404),
)
async def get_schedule(name: str, _: Admin, scheduler: SchedulerDep) -> Response:
    return JSONResponse(schedule_json(await scheduler.get(name)))


@router.delete(
    "/{name}",
    status_code=204,
    summary="Delete a schedule (admin)",
    description="Its jobs already made are kept. A schedule from the config file is 409: "
    "remove it from the file instead.",
    responses=_problems(
        *AUTHED,
        404,
        409,
        described={409: "`invalid-state`: the schedule comes from the config file."},
    ),
)
async def delete_schedule(name: str, _: Admin, scheduler: SchedulerDep) -> Response:
    await scheduler.delete(name)
    return Response(status_code=204)


@router.post(
    "/{name}/pause",
    **NO_FIELDS,
    response_model=ScheduleOut,
    summary="Pause a schedule (admin)",
    description="Stored: it holds across restarts and on every node. A pass of the due "
    "fires (every schedule's, as the sweeper's) runs first, so a fire that came before the "
    "pause and that no sweep has made yet (a sweep may come a `sweep_interval_seconds` "
    "late) is made; no later one is. Pausing a paused schedule changes nothing.",
    responses=_problems(*AUTHED, 404, *NO_BODY),
)
async def pause_schedule(
    name: str, _: Admin, scheduler: SchedulerDep, _fields: NoFields
) -> Response:
    return JSONResponse(schedule_json(await scheduler.pause(name)))


@router.post(
    "/{name}/resume",
    **NO_FIELDS,
    response_model=ScheduleOut,
    summary="Resume a schedule (admin)",
    description="It fires next at its next time after now (or after its last fire, should "
    "this node's clock be behind the one that made it); fires missed while paused are "
    "not made up. Resuming a schedule that is not paused changes nothing: a fire already "
    "due is still made (so a resume sent again is safe). The next fire is written only if "
    "no other request changed the schedule since it was read (else it is read again): 503 "
    "`unavailable` if others kept changing it, as a resume sent again then is safe too.",
    responses=_problems(*AUTHED, 404, *NO_BODY),
)
async def resume_schedule(
    name: str, _: Admin, scheduler: SchedulerDep, _fields: NoFields
) -> Response:
    return JSONResponse(schedule_json(await scheduler.resume(name)))


@router.post(
    "/{name}/trigger",
    **NO_FIELDS,
    status_code=201,
    response_model=JobOut,
    summary="Make the schedule's job now (admin)",
    description="Whatever its pause and `overlap`: an explicit act. Sets `last_job_id`.",
    responses=_problems(
        *AUTHED,
        404,
        422,
        *NO_BODY,
        described={
            422: "`unknown-job-type`: the schedule's type left the config; `validation`: "
            "a body other than none or `{}`."
        },
    )
    | {201: located("/jobs/{id}")},
)
async def trigger_schedule(
    name: str, _: Admin, scheduler: SchedulerDep, _fields: NoFields
) -> Response:
    job = await scheduler.trigger(name)
    headers = {"Location": f"/jobs/{job.id}"}
    return JSONResponse(job_json(job, show_error=True), status_code=201, headers=headers)
