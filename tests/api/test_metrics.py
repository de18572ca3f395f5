"""``GET /metrics``: the HTTP request series that prometheus_client's Counter and
Histogram export, and the jobs by status and type."""

from __future__ import annotations

import math

from prometheus_client import Histogram, disable_created_metrics, enable_created_metrics
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from tests.conftest import Api, enqueue


def _samples(admin: Api) -> list[Sample]:
    response = admin.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return [s for family in text_string_to_metric_families(response.text) for s in family.samples]


def _value(samples: list[Sample], name: str, **labels: str) -> float | None:
    found = [s.value for s in samples if s.name == name and s.labels == labels]
    assert len(found) <= 1
    return found[0] if found else None


def test_requests_are_counted_by_method_route_template_and_status(
    producer: Api, admin: Api
) -> None:
    for _ in range(3):
        enqueue(producer)
    assert producer.post("/jobs", json={"type": "nope"}).status_code == 422
    assert producer.get("/jobs/77").status_code == 404
    assert producer.get("/jobs/78").status_code == 404
    assert producer.get("/nowhere").status_code == 404
    samples = _samples(admin)
    total = "queuelog_http_requests_total"
    assert _value(samples, total, method="POST", route="/jobs", status="201") == 3
    assert _value(samples, total, method="POST", route="/jobs", status="422") == 1
    # Ids are not labels: one series per route, not per job.
    assert _value(samples, total, method="GET", route="/jobs/{job_id}", status="404") == 2
    assert _value(samples, total, method="GET", route="unmatched", status="404") == 1


def test_hardening_45_an_unusual_method_is_one_label_whoever_sends_it(
    admin: Api,
) -> None:
    """Anyone, without a key, may send any method the HTTP parser reads: unusual ones
    count under one label, so they cannot add series without end."""
    odd = ["PROPFIND", "MKCALENDAR", "M-SEARCH", "PURGE", "LOCK", "TRACE", "PATCH"]
    anonymous = Api(admin.client, None)
    for method in odd:
        assert anonymous.request(method, "/jobs").status_code in {401, 405}
    samples = _samples(admin)
    methods = {s.labels["method"] for s in samples if s.name == "queuelog_http_requests_total"}
    assert methods <= {"GET", "POST", "PATCH", "other"}
    total = "queuelog_http_requests_total"
    assert _value(samples, total, method="other", route="/jobs", status="405") == len(odd) - 1


def test_latency_is_a_histogram_on_prometheus_client_s_default_buckets(
    producer: Api, admin: Api
) -> None:
    for _ in range(4):
        enqueue(producer)
    samples = _samples(admin)
    name = "queuelog_http_request_duration_seconds"
    labels = {"method": "POST", "route": "/jobs"}
    buckets = [s for s in samples if s.name == f"{name}_bucket" and s.labels.keys() > {"le"}]
    ours = [s for s in buckets if {k: v for k, v in s.labels.items() if k != "le"} == labels]
    assert [float(s.labels["le"]) for s in ours] == list(Histogram.DEFAULT_BUCKETS)
    assert float(ours[-1].labels["le"]) == math.inf
    counts = [s.value for s in ours]
    assert counts == sorted(counts) and counts[-1] == 4
    assert _value(samples, f"{name}_count", **labels) == 4
    seconds = _value(samples, f"{name}_sum", **labels)
    assert seconds is not None and seconds > 0


def test_created_series_follow_prometheus_client_s_switch(producer: Api, admin: Api) -> None:
    enqueue(producer)
    assert "queuelog_http_requests_created{" in admin.get("/metrics").text
    disable_created_metrics()
    try:
        text = admin.get("/metrics").text
    finally:
        enable_created_metrics()
    assert "_created" not in text
    assert 'queuelog_http_requests_total{method="POST",route="/jobs",status="201"} 1.0' in text


def test_jobs_are_counted_by_status_and_type(producer: Api, admin: Api) -> None:
    enqueue(producer)
    enqueue(producer, "resize_image")
    samples = _samples(admin)
    assert _value(samples, "queuelog_jobs", status="pending", type="noop") == 1
    assert _value(samples, "queuelog_jobs", status="pending", type="resize_image") == 1
