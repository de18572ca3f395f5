"""The HTTP metrics export the series prometheus_client's Counter and Histogram would."""

from __future__ import annotations

import re

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    enable_created_metrics,
    generate_latest,
)

from queuelog.api.metrics import _HttpCollector

# (method, route, status, seconds): every bucket's edge, both sides of it, and beyond.
OBSERVED = [
    ("POST", "/jobs", 201, 0.0),
    ("POST", "/jobs", 201, 0.005),
    ("POST", "/jobs", 201, 0.0050001),
    ("POST", "/jobs", 200, 0.3),
    ("POST", "/jobs", 422, 1.0),
    ("POST", "/jobs/claim", 200, 9.99),
    ("POST", "/jobs/claim", 200, 10.0),
    ("POST", "/jobs/claim", 200, 31.5),
    ("GET", "/jobs/{job_id}", 404, 0.02),
]


def _without_created_values(text: str) -> str:
    return re.sub(r"^(\S+_created\{.*\}) \S+$", r"\1 T", text, flags=re.MULTILINE)


def _reference() -> str:
    registry = CollectorRegistry()
    requests = Counter(
        "queuelog_http_requests",
        "HTTP requests by method, route and status",
        ["method", "route", "status"],
        registry=registry,
    )
    latency = Histogram(
        "queuelog_http_request_duration_seconds",
        "HTTP request latency by method and route",
        ["method", "route"],
        registry=registry,
    )
    for method, route, status, seconds in OBSERVED:
        requests.labels(method, route, str(status)).inc()
        latency.labels(method, route).observe(seconds)
    return generate_latest(registry).decode()


def test_the_series_are_prometheus_client_s() -> None:
    registry = CollectorRegistry()
    collector = _HttpCollector()
    registry.register(collector)
    for observed in OBSERVED:
        collector.observe(*observed)
    ours = generate_latest(registry).decode()
    assert _without_created_values(ours) == _without_created_values(_reference())
    assert 'queuelog_http_requests_total{method="POST",route="/jobs",status="201"} 3.0' in ours
    bucket = 'queuelog_http_request_duration_seconds_bucket{le="0.005",method="POST",route="/jobs"}'
    assert f"{bucket} 2.0" in ours  # 0.0 and 0.005 itself


def test_created_series_follow_prometheus_client_s_switch() -> None:
    registry = CollectorRegistry()
    collector = _HttpCollector()
    registry.register(collector)
    collector.observe("POST", "/jobs", 201, 0.01)
    assert "_created" in generate_latest(registry).decode()
    disable_created_metrics()
    try:
        text = generate_latest(registry).decode()
    finally:
        enable_created_metrics()
    assert "_created" not in text
    assert 'queuelog_http_request_duration_seconds_count{method="POST",route="/jobs"} 1.0' in text
