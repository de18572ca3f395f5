"""Operations: health, readiness, statistics and Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST

from queuelog.api.answers import StatsOut
from queuelog.api.deps import Admin, MetricsReader, ServiceDep
from queuelog.api.openapi import AUTHED, RETRY_AFTER, problems
from queuelog.api.problems import problem
from queuelog.errors import StorageUnavailable

router = APIRouter(tags=["operations"])


# HEAD is answered as GET, without the body (uvicorn sends none for HEAD): load
# balancers and uptime checks probe with it. Kept out of the OpenAPI document, where
# it would repeat GET.
@router.head("/healthz", include_in_schema=False)
@router.get("/healthz", summary="The process is up (no auth)")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.head("/readyz", include_in_schema=False)
@router.get(
    "/readyz",
    summary="The node can read and write its database (no auth)",
    description="200 while the database answers and takes writes. 503 `unavailable` "
    "while it cannot be reached or no connection is free within `connection_wait_seconds` "
    "(the node's own requests hold them all: 200 again once one is), or since a write was "
    "refused for a storage fault (no space, an I/O error, read-only): each check then "
    "tries a small write, and answers 200 again once one is stored.",
    responses={
        503: {"description": "`unavailable`: the node cannot write now.", "headers": RETRY_AFTER}
    },
)
async def readyz(service: ServiceDep) -> Response:
    storage = service.storage
    if not await storage.ping():
        # No fault recorded: the check's read found the database away, or every
        # connection busy (this node's own load).
        fault = storage.health.fault or StorageUnavailable("The database did not answer")
        return problem(503, "unavailable", "Database unavailable", fault.detail, fault.retry_after)
    return JSONResponse({"status": "ready"})


@router.get(
    "/stats",
    summary="Counts by status and type, and the age of the oldest ready job (admin)",
    description=(
        "`by_status` holds every status, `by_type` every configured type (and any other that "
        "has jobs) with every status: a count that falls to zero reads 0. "
        "`oldest_ready_age_seconds` is how long the oldest ready job has waited (null: none "
        "is ready); a paused type's jobs count as ready."
    ),
    response_model=StatsOut,
    responses=problems(*AUTHED),
)
async def stats(_: Admin, service: ServiceDep) -> Response:
    snapshot = await service.stats()
    by_status: dict[str, int] = {}
    by_type: dict[str, dict[str, int]] = {}
    for (status, job_type), count in sorted(snapshot.counts.items()):
        by_status[status] = by_status.get(status, 0) + count
        by_type.setdefault(job_type, {})[status] = count
    oldest = snapshot.oldest_ready_at
    age = (service.clock.now() - oldest).total_seconds() if oldest else None
    return JSONResponse(
        {"by_status": by_status, "by_type": by_type, "oldest_ready_age_seconds": age}
    )


@router.get(
    "/metrics",
    summary="Prometheus metrics (admin)",
    description="While the database cannot be read, an admin key this node found active "
    "before is still taken, so that the storage fault's metrics can be read (the jobs' "
    "and schedules' are then left out).",
    response_class=Response,
    responses=problems(*AUTHED) | {200: {"content": {"text/plain": {}}}},
)
async def metrics(request: Request, _: MetricsReader) -> Response:
    exposition = await request.app.state.metrics.exposition()
    return Response(exposition, media_type=CONTENT_TYPE_LATEST)
