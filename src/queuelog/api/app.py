"""create_app: builds the service, the key ring and the routes. No globals."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from fastapi import FastAPI

from queuelog._version import __version__
from queuelog.api.docs import mount_docs
from queuelog.api.metrics import Metrics, MetricsMiddleware
from queuelog.api.middleware import (
    BodyLimitMiddleware,
    InternalErrorMiddleware,
    PathHeadersMiddleware,
)
from queuelog.api.openapi import install as install_openapi
from queuelog.api.openapi import operation_id
from queuelog.api.problems import install_handlers
from queuelog.api.routes import claims, jobs, keys, ops, schedules, types
from queuelog.app_state import AppState
from queuelog.auth import KeyRing, RateLimiter
from queuelog.clock import Clock, SystemClock
from queuelog.config import Settings
from queuelog.dashboard import dashboard_router
from queuelog.dashboard.throughput import Throughput
from queuelog.dashboard.web import SECURITY_HEADERS
from queuelog.maintenance import Maintenance
from queuelog.scheduler import Scheduler
from queuelog.service import JobService
from queuelog.storage import open_storage
from queuelog.storage.protocol import Storage
from queuelog.storage.subscribers import FinishSubscriber, ReadySubscriber
from queuelog.wakeup import Finishes, Wakeup

DESCRIPTION = """
A durable background job queue. Producers enqueue jobs; workers claim them,
run them and report back. Every route but `/healthz`, `/readyz`,
`/openapi.json` and `/docs` needs `Authorization: Bearer <api key>`.
`/healthz` and `/readyz` also answer `HEAD` (the status and headers of `GET`, no
body), as load balancers and uptime checks probe.

Every error is `application/problem+json` (RFC 9457) with a stable `type` slug.
Times are RFC 3339 UTC strings with microseconds.

Choices where the contract is silent:

* A job the caller may not see is answered 404, never 403.
* `POST /jobs/claim` with `types` naming an unconfigured type is 422
  `unknown-job-type`; naming a type the key may not claim is 403.
* A heartbeat without `lease_seconds` renews the lease for the length last asked for
  (the claim's `lease_seconds`, or an earlier heartbeat's), else the job type's lease.
* `POST /jobs/{id}/release` gives a held job back unrun: pending at once, its
  attempt not spent (beanstalkd's `release`); guarded like a heartbeat.
* A lease token that no issued token could be (not printable ASCII) is checked
  as a wrong token: 409 `not-lease-holder` (or 404/409 `invalid-state` by the
  job's state).
* A key with several roles sees the union of what each role sees. One reading of the
  contract is narrowed: `depends_on` ("jobs the caller may see") names only jobs the
  key enqueued (any, for an admin), not one it holds as a worker now: waiting for a job
  lets its producer read the job's outcome for good (`/dependencies`), so it rests on
  lasting sight of the job, not on a lease.
* A JSON body may be sent as `application/json` or as any `application/*+json` media
  type (RFC 6839's JSON suffix), parameters such as `charset` aside; any other is 415.
  A body with a content coding (`Content-Encoding: gzip`, `br`, ...; `identity` is
  none) is 415 too, with `Accept-Encoding: identity` (RFC 9110): read as it is, it
  would not be the request a proxy that decodes it sees.
* The `detail` of `failed`, `retry_scheduled` and `lease_expired` events is the
  sanitised error text, shown to admins only, like the job's `error`.
* `POST /jobs/batch/complete` answers 422 `payload-too-large` for an item whose
  result is too large, besides 200, 404 and 409. With `Prefer: return=minimal`
  (RFC 7240) a completed item is `{"id", "status": 200}` without its job, and the
  answer carries `Preference-Applied: return=minimal`.
* When the database cannot take a request (unreachable, no connection within
  `connection_wait_seconds`, an I/O error, read-only, locked by another program
  past the busy timeout; on PostgreSQL, a write that lost a deadlock to other
  writes of the same jobs or keys on each of its three tries) the answer is 503
  `unavailable`, and when it has no space left 507 `insufficient-storage`, both
  with `Retry-After`, on every route and for a whole batch; never a 500. Nothing was
  stored for a 507; for a 503 the outcome may be unknown, so clients resend only the
  calls that are safe to resend.
  `/readyz` answers 503 while the node cannot write, and 200 once it can again. A
  lost deadlock, or no connection free while this node's own requests use them all,
  is load, not a fault: nothing else is refused after it (readiness, whose check waits
  for a connection too, is 503 only while none is free).
* Ids are positive 64-bit integers; an id of 0 or beyond 2^63-1 is 422 `validation`. A path
  segment that is not an id as the API writes it (`/jobs/-1`, `/jobs/010`) names no route:
  404 `not-found`.
* Routes that take no fields (cancel, retry, pause, resume, trigger) take no body, or
  `{}`: any other JSON value is 422 `validation`, checked as fields are (after the key
  and the role), and nothing is done; as on every route, a body past the size limit is
  413, one that is not JSON 415, and malformed JSON 422.
* A JSON body in which an object names a member twice (`{"type": "a", "type": "b"}`, at
  any depth, a payload's too) is 422 `validation` before the key is looked at, as
  malformed JSON is: readers disagree on which value such an object means.
* An enqueue's W3C `traceparent` and `tracestate` headers are stored with each job it
  makes and handed to the worker that claims it (`trace_context`); a malformed one is
  ignored as the Trace Context recommendation says, never refused.
* A request the HTTP parser refuses (malformed, a head over 64 KiB, both
  `Content-Length` and `Transfer-Encoding`) is 400 `bad-request` and its
  connection is closed; a head not all sent within 10 s closes the connection.
* A request is checked in this order: body size (413), media type (415), JSON
  syntax (422), API key (401), rate limit (429), role (403), then the fields (422)
  and the rules. The first three cost nothing to check and reveal nothing.
* A query parameter is given once (twice is 422 `validation`, whichever value comes
  first; one the route does not read is ignored). A whole number in a query is written
  in decimal digits, and `wait_seconds` as JSON writes a number (`0.25`, `1e-7`):
  `1_0`, `+10`, ` 10` or `.5` are 422 `validation`.
* A claim's body is a JSON object, as every body is: `{}` takes every default (one
  job of any type this node configures and the key may claim, no wait).
* Schedules: a job made by a schedule has `run_at` = its fire time and belongs to the
  principal `schedule:<name>` (no key may have a name starting `schedule:`). A taken
  schedule name is 409 `invalid-state`, as is deleting a schedule from the config file.
  Resuming a schedule sets its next run to the next fire time after now (fires missed
  while paused are not made up). A schedule's answer also carries `jobs_made` and
  `fires_skipped`. A schedule whose type left the config skips its fires (counted in
  `fires_skipped`); `trigger` on it is 422 `unknown-job-type`.
* Workflows: `GET /jobs?depends_on=ID` lists a job's dependents (as the caller may see
  them). A batch names at most 10,000 dependencies (`depends_on` and `depends_on_items`
  of all its items). An admin retry of a job with dependencies
  makes it `waiting` until they have ended as it needs (a failed one counts as not ended
  until it is redriven). The jobs a redriven job's failure cancelled wait again, unless
  another of their dependencies failed too: a redrive of that one brings them back.
  Retention keeps a job while a job not completed depends on it (a failed or cancelled
  one until it is deleted: a redrive may bring it back).
"""


def create_app(
    settings: Settings,
    storage: Storage | None = None,
    clock: Clock | None = None,
    run_maintenance: bool = True,
) -> FastAPI:
    """Build the application; it owns (and closes) the storage it is given or opens."""
    storage = storage or open_storage(settings)
    state = _state(settings, storage, clock or SystemClock())
    maintenance = Maintenance(
        state.service, settings.sweep_interval_seconds, scheduler=state.schedules
    )
    app = FastAPI(
        title="queuelog",
        version=__version__,
        description=DESCRIPTION,
        lifespan=_lifespan(maintenance if run_maintenance else None, storage, state.schedules),
        docs_url=None,
        redoc_url=None,
        # No 307 from /jobs/ to /jobs: it would name the request's own Host header,
        # and some clients resend a POST, Authorization and all, to wherever it points.
        redirect_slashes=False,
        generate_unique_id_function=operation_id,
        # queuelog exports Prometheus metrics itself. FastAPI's OpenTelemetry hooks
        # would otherwise look up the providers (environment reads) on every request.
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    mount_docs(app)
    install_openapi(app, list(settings.types))
    app.state.queuelog = state
    app.state.maintenance = maintenance
    app.state.metrics = Metrics(state.service, state.finishes, state.schedules)
    install_handlers(app)
    _include_routes(app, settings)
    _add_middleware(app, settings)
    return app


def _add_middleware(app: FastAPI, settings: Settings) -> None:
    """The one middleware stack every request goes through, innermost first."""
    app.add_middleware(InternalErrorMiddleware)  # innermost: the metrics count its 500s
    app.add_middleware(
        BodyLimitMiddleware, max_bytes=settings.limits.max_request_bytes, form_prefixes=("/ui",)
    )
    app.add_middleware(PathHeadersMiddleware, prefix="/ui", headers=SECURITY_HEADERS)
    app.add_middleware(MetricsMiddleware, metrics=app.state.metrics)
    if settings.server.otel:  # the otel extra's: imported only then
        from queuelog.api.request_spans import install_request_spans

        install_request_spans(app)  # outermost


def _lifespan(
    maintenance: Maintenance | None, storage: Storage, schedules: Scheduler
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """Store the config's schedules, run ``maintenance`` (if any) while the app serves;
    close the storage at the end."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await schedules.sync_config()
        if maintenance is not None:
            maintenance.start()
        try:
            yield
        finally:
            if maintenance is not None:
                await maintenance.stop()
            storage.close()

    return lifespan


def _state(settings: Settings, storage: Storage, clock: Clock) -> AppState:
    wakeup = Wakeup(settings.server.claim_recheck_seconds)
    finishes = Finishes()
    service = JobService(
        storage, settings, clock, on_ready=wakeup.notify, on_finished=finishes.notify
    )
    if isinstance(storage, ReadySubscriber):
        # Jobs made ready on other nodes sharing the database wake this node's claimers.
        storage.subscribe(wakeup.notify)
    if isinstance(storage, FinishSubscriber):
        # Jobs finished on other nodes answer this node's requests awaiting them.
        storage.subscribe_finished(finishes.notify)
    return AppState(
        settings=settings,
        service=service,
        keys=KeyRing(storage, clock),
        limiter=RateLimiter(settings.limits.rate_per_second, settings.limits.rate_burst),
        wakeup=wakeup,
        finishes=finishes,
        schedules=Scheduler(storage, settings, clock, on_ready=wakeup.notify),
        chart=Throughput(service),
    )


def _include_routes(app: FastAPI, settings: Settings) -> None:
    # Literal segments (/jobs/claim, /jobs/batch) are registered before /jobs/{id}; the
    # hottest routes first, as they are matched most.
    app.include_router(jobs.lean)
    app.include_router(claims.lean)
    app.include_router(claims.router)
    app.include_router(jobs.router)
    app.include_router(keys.router)
    app.include_router(schedules.router)
    app.include_router(types.router)
    app.include_router(ops.router)
    dashboard = dashboard_router(settings.server.ui_session_seconds)
    app.include_router(dashboard, include_in_schema=False)
