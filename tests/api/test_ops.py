"""Health, readiness, stats, metrics and the OpenAPI description."""

from __future__ import annotations

import pytest

from queuelog.clock import FakeClock
from tests.conftest import TYPES, Api, claim_one, enqueue


def test_healthz_and_readyz(anonymous: Api) -> None:
    assert anonymous.get("/healthz").json() == {"status": "ok"}
    assert anonymous.get("/readyz").json() == {"status": "ready"}


def test_hardening_50_stats_count_every_status_and_type_zero_too(
    producer: Api, worker: Api, admin: Api, clock: FakeClock
) -> None:
    enqueue(producer, "noop")
    enqueue(producer, "noop")
    enqueue(producer, "send_email", payload={"to": "x"})
    claim_one(worker, types=["send_email"])
    clock.advance(12)
    stats = admin.get("/stats").json()
    none = dict.fromkeys(["waiting", "pending", "running", "completed", "failed", "cancelled"], 0)
    assert stats["by_status"] == {**none, "pending": 2, "running": 1}
    # Every configured type, every status: a count that falls to zero reads 0.
    assert stats["by_type"] == {
        **{job_type: none for job_type in TYPES},
        "noop": {**none, "pending": 2},
        "send_email": {**none, "running": 1},
    }
    assert stats["oldest_ready_age_seconds"] == 12


def test_hardening_50_metrics_count_every_status_of_every_configured_type_zero_too(
    producer: Api, worker: Api, admin: Api
) -> None:
    enqueue(producer, "noop")
    held = claim_one(worker)
    text = admin.get("/metrics").text
    assert 'queuelog_jobs{status="running",type="noop"} 1.0' in text
    assert 'queuelog_jobs{status="pending",type="noop"} 0.0' in text
    assert 'queuelog_jobs{status="failed",type="send_email"} 0.0' in text
    done = {"lease_token": held["lease_token"]}
    worker.post(f"/jobs/{held['id']}/complete", json=done)
    assert 'queuelog_jobs{status="running",type="noop"} 0.0' in admin.get("/metrics").text


def test_metrics_are_prometheus_text(producer: Api, admin: Api) -> None:
    enqueue(producer)
    producer.get("/jobs/77")
    response = admin.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    text = response.text
    assert 'queuelog_jobs{status="pending",type="noop"} 1.0' in text
    assert 'queuelog_http_requests_total{method="POST",route="/jobs",status="201"} 1.0' in text
    assert 'route="/jobs/{job_id}",status="404"' in text
    assert "queuelog_http_request_duration_seconds_bucket" in text


def test_openapi_documents_every_route_and_its_errors(anonymous: Api) -> None:
    spec = anonymous.get("/openapi.json").json()
    paths = spec["paths"]
    expected = {
        ("post", "/jobs"): {"401", "403", "413", "415", "422", "429"},
        ("post", "/jobs/batch"): {"401", "403", "422"},
        ("get", "/jobs"): {"401", "403", "422"},
        ("get", "/jobs/{job_id}"): {"401", "404"},
        ("get", "/jobs/{job_id}/events"): {"404"},
        ("post", "/jobs/claim"): {"401", "403", "422"},
        ("post", "/jobs/{job_id}/heartbeat"): {"404", "409"},
        ("post", "/jobs/{job_id}/complete"): {"404", "409", "422"},
        ("post", "/jobs/{job_id}/fail"): {"404", "409", "422"},
        ("post", "/jobs/batch/complete"): {"422"},
        ("post", "/jobs/{job_id}/cancel"): {"404", "409"},
        ("post", "/jobs/{job_id}/retry"): {"404", "409"},
        ("post", "/keys"): {"422"},
        ("get", "/keys"): {"401"},
        ("delete", "/keys/{key_id}"): {"404"},
        ("get", "/stats"): {"403"},
        ("get", "/metrics"): {"403"},
        ("get", "/healthz"): set(),
        ("get", "/readyz"): set(),
    }
    for (method, path), statuses in expected.items():
        documented = set(paths[path][method]["responses"])
        assert statuses <= documented, (method, path, statuses - documented)
    assert "bearer" in str(spec["components"]["securitySchemes"]).lower()
    batch = paths["/jobs/batch/complete"]["post"]
    assert [p["name"] for p in batch["parameters"] if p["in"] == "header"] == ["prefer"]
    assert "Preference-Applied" in batch["responses"]["200"]["headers"]
    assert "return=minimal" in spec["info"]["description"]


def test_openapi_documents_the_storage_faults_on_every_route_that_uses_the_database(
    anonymous: Api,
) -> None:
    spec = anonymous.get("/openapi.json").json()
    assert "507 `insufficient-storage`" in spec["info"]["description"]
    for path, methods in spec["paths"].items():
        for method, operation in methods.items():
            if path in ("/healthz", "/readyz"):
                continue
            assert {"503", "507"} <= set(operation["responses"]), (method, path)
    assert "503" in spec["paths"]["/readyz"]["get"]["responses"]


def test_docs_load_nothing_from_outside_the_server(anonymous: Api) -> None:
    page = anonymous.get("/docs")
    assert page.status_code == 200 and "/openapi.json" in page.text
    assert "https://" not in page.text and "http://" not in page.text
    for asset in ["swagger-ui-bundle.js", "swagger-ui.css"]:
        assert f"/docs/assets/{asset}" in page.text
        assert anonymous.get(f"/docs/assets/{asset}").status_code == 200
    assert page.headers["x-frame-options"] == "DENY"


def test_probes_answer_head_as_get(anonymous: Api) -> None:
    # The body is dropped by the HTTP server (uvicorn sends none for HEAD).
    for path in ["/healthz", "/readyz", "/openapi.json", "/docs", "/docs/assets/swagger-ui.css"]:
        probe = anonymous.request("HEAD", path)
        assert probe.status_code == 200, path
        assert probe.headers["content-type"] == anonymous.get(path).headers["content-type"]


@pytest.mark.parametrize(
    "asset", ["index.html", "swagger-initializer.js", "oauth2-redirect.html", "swagger-ui.js.map"]
)
def test_the_swagger_bundle_s_demo_page_and_other_files_are_not_served(
    anonymous: Api, asset: str
) -> None:
    response = anonymous.get(f"/docs/assets/{asset}")
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/problem+json"


def test_openapi_documents_unique_jobs_awaited_results_and_progress(anonymous: Api) -> None:
    spec = anonymous.get("/openapi.json").json()
    paths, schemas = spec["paths"], spec["components"]["schemas"]
    get_job = paths["/jobs/{job_id}"]["get"]
    (wait,) = [p for p in get_job["parameters"] if p["name"] == "wait_seconds"]
    assert wait["in"] == "query" and wait["schema"]["maximum"] == 30
    assert "completed, failed or cancelled" in get_job["description"]
    enqueue = paths["/jobs"]["post"]
    assert "`replaced`" in enqueue["description"] and "unique_key" in enqueue["description"]
    assert "replace" in enqueue["responses"]["200"]["description"]
    assert {"unique_key", "on_duplicate"} <= set(schemas["EnqueueRequest"]["properties"])
    assert "progress" in schemas["HeartbeatRequest"]["properties"]
    assert {"unique_key", "progress"} <= set(schemas["JobOut"]["required"])
    beat = paths["/jobs/{job_id}/heartbeat"]["post"]["responses"]["422"]
    assert "payload-too-large" in beat["description"] and "4,096" in beat["description"]
    # Every new refusal is a problem document.
    for method, path, status in (
        ("get", "/jobs/{job_id}", "422"),
        ("post", "/jobs/{job_id}/heartbeat", "422"),
        ("post", "/jobs", "422"),
    ):
        content = paths[path][method]["responses"][status]["content"]
        assert "application/problem+json" in content, (method, path)
