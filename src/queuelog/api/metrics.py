"""Prometheus metrics: requests and latencies, jobs by status and type, and schedules'
jobs made and fires skipped."""

from __future__ import annotations

import time
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from starlette.types import ASGIApp, Receive, Scope, Send

from queuelog.api.middleware import Answer, HttpMiddleware
from queuelog.errors import StorageUnavailable
from queuelog.scheduler import Scheduler
from queuelog.schedules import Schedule
from queuelog.service import JobService
from queuelog.storage.health import StorageHealth
from queuelog.wakeup import Finishes

# The methods kept as the label: those an HTTP API's clients send (the routes serve GET,
# HEAD, POST and DELETE; the others are counted as the 405s they are).
_LABELLED_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class _JobsCollector:
    """Jobs by status and type, as counted by the scrape that asked for them (the count
    is a database read, awaited by the /metrics route before the registry is rendered),
    and what flow control did."""

    def __init__(self, service: JobService) -> None:
        self.counts: dict[tuple[str, str], int] = {}
        self._flow = service.flow

    def collect(self) -> Iterator[Metric]:
        gauge = GaugeMetricFamily(
            "queuelog_jobs", "Jobs by status and type", labels=["status", "type"]
        )
        for (status, job_type), count in self.counts.items():
            gauge.add_metric([status, job_type], count)
        yield gauge
        running = GaugeMetricFamily(
            "queuelog_type_running", "Running jobs of each configured type", labels=["type"]
        )
        for job_type, count in self._flow.running_counts(self.counts).items():
            running.add_metric([job_type], count)
        yield running
        skipped = CounterMetricFamily(
            "queuelog_claims_skipped",
            "Claims in which a limit held back a ready job, by type and reason "
            "(paused, concurrency, group_concurrency, rate_limit); counted by this node",
            labels=["type", "reason"],
        )
        for (job_type, reason), count in sorted(self._flow.skipped.items()):
            skipped.add_metric([job_type, reason], count)
        yield skipped
        claims = CounterMetricFamily(
            "queuelog_claims",
            "Claims run against the database by this node, each look of a waiting long "
            "poll included, by whether they found jobs (found: true or false)",
            labels=["found"],
        )
        for found in (True, False):
            claims.add_metric([str(found).lower()], self._flow.claims[found])
        yield claims


class _StorageCollector:
    """Operations refused for a storage fault, by reason, and whether the node writes now."""

    def __init__(self, health: StorageHealth) -> None:
        self._health = health

    def collect(self) -> Iterator[Metric]:
        refused = CounterMetricFamily(
            "queuelog_storage_refused",
            "Operations refused for a storage fault (no space, I/O, read-only, locked, "
            "unreachable; on PostgreSQL a statement canceled) or, on PostgreSQL, for losing "
            "to other writes on each try (contention: no fault), by reason",
            labels=["reason"],
        )
        for reason, count in sorted(self._health.refused().items()):
            refused.add_metric([reason], count)
        yield refused
        yield GaugeMetricFamily(
            "queuelog_storage_writable",
            "1 while the node's writes are stored, 0 since one was refused for a fault",
            value=1 if self._health.writable else 0,
        )


class _SchedulesCollector:
    """Per schedule, the jobs made and the fires skipped, as stored (so the same on every
    node), read by the scrape that asked for them."""

    def __init__(self) -> None:
        self.schedules: list[Schedule] = []

    def collect(self) -> Iterator[Metric]:
        made = CounterMetricFamily(
            "queuelog_schedule_jobs_made", "Jobs made by each schedule", labels=["schedule"]
        )
        skipped = CounterMetricFamily(
            "queuelog_schedule_fires_skipped",
            "Fires of each schedule that made no job",
            labels=["schedule"],
        )
        for schedule in self.schedules:
            made.add_metric([schedule.name], schedule.jobs_made)
            skipped.add_metric([schedule.name], schedule.fires_skipped)
        yield made
        yield skipped


class Metrics:
    """One registry per app: tests and several apps in one process do not collide."""

    def __init__(
        self, service: JobService, finishes: Finishes, scheduler: Scheduler | None = None
    ) -> None:
        self.registry = CollectorRegistry()
        self._requests = Counter(
            "queuelog_http_requests",
            "HTTP requests by method, route and status",
            ["method", "route", "status"],
            registry=self.registry,
        )
        # prometheus_client's default buckets.
        self._latency = Histogram(
            "queuelog_http_request_duration_seconds",
            "HTTP request latency by method and route",
            ["method", "route"],
            registry=self.registry,
        )
        waiting = Gauge(
            "queuelog_result_waits",
            "Requests awaiting a job's result now (GET /jobs/{id}?wait_seconds=N)",
            registry=self.registry,
        )
        waiting.set_function(lambda: finishes.waiting)
        self._service = service
        self._jobs = _JobsCollector(service)
        self.registry.register(self._jobs)
        self.registry.register(_StorageCollector(service.storage.health))
        self._scheduler = scheduler
        self._schedules = _SchedulesCollector()
        self.registry.register(self._schedules)

    async def exposition(self) -> bytes:
        """The registry in Prometheus' text format, with the jobs and schedules counted
        now (none while the database cannot be read: the storage fault metrics are what
        matter then)."""
        try:
            self._jobs.counts = (await self._service.stats()).counts
            if self._scheduler is not None:
                self._schedules.schedules = await self._scheduler.list()
        except StorageUnavailable:
            self._jobs.counts = {}
            self._schedules.schedules = []
        return generate_latest(self.registry)

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        """Count one request and record its latency. Any other method than those kept is
        labelled ``other``: anyone, without a key, chooses the method, and each new
        label would be new series on every scrape for the life of the process."""
        method = method if method in _LABELLED_METHODS else "other"
        self._requests.labels(method, route, str(status)).inc()
        self._latency.labels(method, route).observe(seconds)


class MetricsMiddleware(HttpMiddleware):
    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        super().__init__(app)
        self.metrics = metrics

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()
        answer = Answer(send)
        try:
            await self.app(scope, receive, answer.send)
        finally:
            route = scope.get("route")
            # The route template, not the raw path: ids would make one series per job.
            name = getattr(route, "path_format", "unmatched")
            status = answer.status or 500  # an app that raised before answering
            self.metrics.observe(scope["method"], name, status, time.perf_counter() - started)
