"""create_app: builds the service, the key ring and the routes. No globals."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from fastapi import FastAPI

from queuelog._version import __version__
from queuelog.api.docs import mount_docs
from queuelog.api.lean import register_models
from queuelog.api.metrics import Metrics, MetricsMiddleware
from queuelog.api.middleware import BodyLimitMiddleware
from queuelog.api.problems import install_handlers
from queuelog.api.routes import claims, jobs, keys, ops, types
from queuelog.app_state import AppState
from queuelog.auth import KeyRing, RateLimiter
from queuelog.clock import Clock, SystemClock
from queuelog.config import Settings
from queuelog.dashboard import dashboard_router
from queuelog.maintenance import Maintenance
from queuelog.service import JobService
from queuelog.storage import open_storage
from queuelog.storage.protocol import ReadySubscriber, Storage
from queuelog.wakeup import Wakeup

DESCRIPTION = """
A durable background job queue. Producers enqueue jobs; workers claim them,
run them and report back. Every route but `/healthz`, `/readyz`,
`/openapi.json` and `/docs` needs `Authorization: Bearer <api key>`.

Every error is `application/problem+json` (RFC 9457) with a stable `type` slug.
Times are RFC 3339 UTC strings with microseconds.

Choices where the contract is silent:

* A job the caller may not see is answered 404, never 403.
* `POST /jobs/claim` with `types` naming an unconfigured type is 422
  `unknown-job-type`; naming a type the key may not claim is 403.
* A heartbeat without `lease_seconds` extends the lease by the job type's lease.
* `POST /jobs/{id}/release` gives a held job back unrun: pending at once, its
  attempt not spent (beanstalkd's `release`); guarded like a heartbeat.
* A lease token that no issued token could be (not printable ASCII) is checked
  as a wrong token: 409 `not-lease-holder` (or 404/409 `invalid-state` by the
  job's state).
* A key with several roles sees the union of what each role sees.
* The `detail` of `failed`, `retry_scheduled` and `lease_expired` events is the
  sanitised error text, shown to admins only, like the job's `error`.
* `POST /jobs/batch/complete` answers 422 `payload-too-large` for an item whose
  result is too large, besides 200, 404 and 409. With `Prefer: return=minimal`
  (RFC 7240) a completed item is `{"id", "status": 200}` without its job, and the
  answer carries `Preference-Applied: return=minimal`.
* When the database cannot be reached the answer is 503 `unavailable` (not 500), so
  clients may resend the calls that are safe to resend.
* Ids are positive 64-bit integers; an id outside that range is 422 `validation`.
* A request is checked in this order: body size (413), media type (415), JSON
  syntax (422), API key (401), rate limit (429), role (403), then the fields (422)
  and the rules. The first three cost nothing to check and reveal nothing.
* A claim request may have an empty body (all fields default).
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
    maintenance = Maintenance(state.service, settings.sweep_interval_seconds)
    app = FastAPI(
        title="queuelog",
        version=__version__,
        description=DESCRIPTION,
        lifespan=_lifespan(maintenance if run_maintenance else None, storage),
        docs_url=None,
        redoc_url=None,
        # No 307 from /jobs/ to /jobs: it would name the request's own Host header,
        # and some clients resend a POST, Authorization and all, to wherever it points.
        redirect_slashes=False,
        # queuelog exports Prometheus metrics itself. FastAPI's OpenTelemetry hooks
        # would otherwise look up the providers (environment reads) on every request.
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    mount_docs(app)
    register_models(app)
    app.state.queuelog = state
    app.state.maintenance = maintenance
    app.state.metrics = Metrics(state.service)
    install_handlers(app)
    _include_routes(app)
    app.add_middleware(
        BodyLimitMiddleware, max_bytes=settings.limits.max_request_bytes, form_prefixes=("/ui",)
    )
    app.add_middleware(MetricsMiddleware, metrics=app.state.metrics)
    return app


def _lifespan(
    maintenance: Maintenance | None, storage: Storage
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """Run ``maintenance`` (if any) while the app serves; close the storage at the end."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
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
    service = JobService(storage, settings, clock, on_ready=wakeup.notify)
    if isinstance(storage, ReadySubscriber):
        # Jobs made ready on other nodes sharing the database wake this node's claimers.
        storage.subscribe(wakeup.notify)
    return AppState(
        settings=settings,
        service=service,
        keys=KeyRing(storage, clock),
        limiter=RateLimiter(settings.limits.rate_per_second, settings.limits.rate_burst),
        wakeup=wakeup,
    )


def _include_routes(app: FastAPI) -> None:
    # Literal segments (/jobs/claim, /jobs/batch) are registered before /jobs/{id}; the
    # hottest routes first, as they are matched most.
    app.include_router(jobs.lean)
    app.include_router(claims.lean)
    app.include_router(claims.router)
    app.include_router(jobs.router)
    app.include_router(keys.router)
    app.include_router(types.router)
    app.include_router(ops.router)
    app.include_router(dashboard_router(), include_in_schema=False)
