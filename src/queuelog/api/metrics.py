"""Prometheus metrics: requests and latencies, and jobs by status and type."""

from __future__ import annotations

import math
import os
import threading
import time
from bisect import bisect_left
from collections.abc import Iterator
from itertools import accumulate

import prometheus_client.metrics
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from queuelog.service import JobService


class _JobsCollector:
    """Jobs by status and type, as counted by the scrape that asked for them (the count
    is a database read, awaited by the /metrics route before the registry is rendered)."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str], int] = {}

    def collect(self) -> Iterator[Metric]:
        gauge = GaugeMetricFamily(
            "queuelog_jobs", "Jobs by status and type", labels=["status", "type"]
        )
        for (status, job_type), count in self.counts.items():
            gauge.add_metric([status, job_type], count)
        yield gauge


# Latency buckets: prometheus_client's defaults, from 5 ms to 10 s.
_BOUNDS = Histogram.DEFAULT_BUCKETS
_LE = ["+Inf" if bound == math.inf else repr(bound) for bound in _BOUNDS]


def _created_series() -> bool:
    """Whether to export ``_created`` samples, as prometheus_client decides it: its
    ``disable_created_metrics()`` switch, else its environment variable."""
    flag = os.environ.get("PROMETHEUS_DISABLE_CREATED_SERIES", "False")
    default = flag.lower() not in ("true", "1", "t")
    return bool(getattr(prometheus_client.metrics, "_use_created", default))


class _HttpCollector:
    """The request counter and latency histogram, kept as plain numbers under one lock
    and turned into their families when scraped.

    The series are those prometheus_client's ``Counter`` and ``Histogram`` export
    (a test compares the two); their objects took three locks and about a dozen
    calls per request, about 5 % of a single enqueue's instructions.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # (method, route, status) -> [count, created]
        self._counts: dict[tuple[str, str, int], list[float]] = {}
        # (method, route) -> [count per bucket..., sum, created]
        self._latency: dict[tuple[str, str], list[float]] = {}

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        bucket = bisect_left(_BOUNDS, seconds)  # the first bound >= seconds
        with self._lock:
            counted = self._counts.get((method, route, status))
            if counted is None:
                counted = self._counts[(method, route, status)] = [0.0, time.time()]
            counted[0] += 1
            timed = self._latency.get((method, route))
            if timed is None:
                timed = self._latency[(method, route)] = [0.0] * len(_BOUNDS) + [0.0, time.time()]
            timed[bucket] += 1
            timed[-2] += seconds

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            counts = [(labels, list(values)) for labels, values in self._counts.items()]
            latency = [(labels, list(values)) for labels, values in self._latency.items()]
        created = _created_series()
        requests = CounterMetricFamily(
            "queuelog_http_requests",
            "HTTP requests by method, route and status",
            labels=["method", "route", "status"],
        )
        for (method, route, status), (count, stamp) in counts:
            requests.add_metric(
                [method, route, str(status)], count, created=stamp if created else None
            )
        yield requests
        timed = HistogramMetricFamily(
            "queuelog_http_request_duration_seconds",
            "HTTP request latency by method and route",
            labels=["method", "route"],
        )
        for (method, route), values in latency:
            cumulative = list(accumulate(values[: len(_BOUNDS)]))
            timed.add_metric([method, route], list(zip(_LE, cumulative, strict=True)), values[-2])
            if created:
                labels = {"method": method, "route": route}
                timed.add_sample(f"{timed.name}_created", labels, values[-1])
        yield timed


class Metrics:
    """One registry per app: tests and several apps in one process do not collide."""

    def __init__(self, service: JobService) -> None:
        self.registry = CollectorRegistry()
        self._service = service
        self._http = _HttpCollector()
        self._jobs = _JobsCollector()
        self.registry.register(self._http)
        self.registry.register(self._jobs)

    async def exposition(self) -> bytes:
        """The registry in Prometheus' text format, with the jobs counted now."""
        self._jobs.counts = (await self._service.stats()).counts
        return generate_latest(self.registry)

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        """Count one request and record its latency."""
        self._http.observe(method, route, status, seconds)


class MetricsMiddleware:
    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def record_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, record_status)
        finally:
            route = scope.get("route")
            # The route template, not the raw path: ids would make one series per job.
            name = getattr(route, "path_format", "unmatched")
            self.metrics.observe(scope["method"], name, status, time.perf_counter() - started)
