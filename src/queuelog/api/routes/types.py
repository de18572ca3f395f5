"""Job types (admin): their limits, running counts and pauses."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Response
from pydantic import BaseModel, Field

from queuelog.api.deps import Admin, ServiceDep
from queuelog.api.lean import NO_FIELDS, JsonRoute, NoFields
from queuelog.api.openapi import AUTHED, NO_BODY, problems
from queuelog.api.responses import JSONResponse
from queuelog.clock import rfc3339
from queuelog.flow import TypeState


class RateLimitOut(BaseModel):
    jobs: int
    per_seconds: float


class TypeCountsOut(BaseModel):
    pending: int
    waiting: int
    running: int
    failed: int


class TypeOut(BaseModel):
    name: str
    concurrency: int | None = Field(description="Running jobs of the type at most; null: no limit.")
    group_concurrency: int | None = Field(description="Running jobs per group at most.")
    rate_limit: RateLimitOut | None = Field(description="Claims in any window of `per_seconds`.")
    paused: bool
    paused_by: str | None = Field(description="The admin key that paused the type.")
    paused_at: str | None
    counts: TypeCountsOut


class TypeListOut(BaseModel):
    types: list[TypeOut]


router = APIRouter(prefix="/types", tags=["types"], route_class=JsonRoute)

# The rest of the path before /pause or /resume: a type's name may hold a slash
# (``team/mail``), sent as it is or as %2F.
TypeName = Annotated[
    str,
    Path(
        min_length=1,
        max_length=100,
        description="A configured job type; a slash in its name may be sent as it is or as `%2F`.",
    ),
]

_NO_TYPE = "`not-found`: the job type is not configured."
_BAD_NAME = (
    "`validation`: the type name is longer than 100 characters, or the body is not absent or `{}`."
)


def type_json(state: TypeState) -> dict[str, Any]:
    cfg, pause = state.config, state.pause
    rate = cfg.rate_limit
    return {
        "name": state.name,
        "concurrency": cfg.concurrency,
        "group_concurrency": cfg.group_concurrency,
        "rate_limit": {"jobs": rate.jobs, "per_seconds": rate.per_seconds} if rate else None,
        "paused": pause is not None,
        "paused_by": pause.paused_by if pause else None,
        "paused_at": rfc3339(pause.paused_at) if pause else None,
        "counts": state.counts,
    }


@router.get(
    "",
    response_model=TypeListOut,
    summary="Every configured job type (admin)",
    description=(
        "Each type with its limits from the config (`concurrency`, `group_concurrency`, "
        "`rate_limit`; null where none is set), whether it is paused (and by which admin "
        "key, since when), and its jobs counted by status: `pending`, `waiting`, `running` "
        "and `failed`. Sorted by name."
    ),
    responses=problems(*AUTHED),
)
async def list_types(_: Admin, service: ServiceDep) -> Response:
    states = await service.flow.list_types()
    return JSONResponse({"types": [type_json(s) for s in states]})


@router.post(
    "/{job_type:path}/pause",
    **NO_FIELDS,
    response_model=TypeOut,
    summary="Pause a job type (admin)",
    description=(
        "A paused type is never claimed by a claim sent after the pause's answer, by any "
        "worker on any node (one sent before may still take its jobs as the pause lands); "
        "its jobs keep their place and enqueues are still accepted. The pause is stored in "
        "the database, so it holds across restarts. Pausing a paused type changes nothing. "
        "The change is recorded with the admin key's name. 200 with the type's entry."
    ),
    responses=problems(*AUTHED, 404, 422, *NO_BODY, described={404: _NO_TYPE, 422: _BAD_NAME}),
)
async def pause_type(
    job_type: TypeName, caller: Admin, service: ServiceDep, _fields: NoFields
) -> Response:
    state = await service.flow.set_paused(caller, job_type, True)
    return JSONResponse(type_json(state))


@router.post(
    "/{job_type:path}/resume",
    **NO_FIELDS,
    response_model=TypeOut,
    summary="Resume a paused job type (admin)",
    description=(
        "The type's jobs are claimable again at once (waiting claims are woken). Resuming "
        "a type that is not paused changes nothing. The change is recorded with the admin "
        "key's name. 200 with the type's entry."
    ),
    responses=problems(*AUTHED, 404, 422, *NO_BODY, described={404: _NO_TYPE, 422: _BAD_NAME}),
)
async def resume_type(
    job_type: TypeName, caller: Admin, service: ServiceDep, _fields: NoFields
) -> Response:
    state = await service.flow.set_paused(caller, job_type, False)
    return JSONResponse(type_json(state))
