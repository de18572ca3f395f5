"""The OpenAPI document is what the server does: every real answer of a job's whole life,
and every kind of refusal, is documented for its operation, with its content type, and
matches the published schema."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import httpx
import jsonschema
import pytest
from fastapi.testclient import TestClient

from tests.conftest import TYPES, Api

Document = dict[str, Any]


@pytest.fixture
def document(client: TestClient) -> Document:
    answer = client.get("/openapi.json")
    assert answer.status_code == 200
    doc: Document = answer.json()
    return doc


def _operation(document: Document, method: str, url: str) -> tuple[str, Document]:
    path = httpx.URL(url).path
    for template, item in document["paths"].items():
        pattern = re.sub(r"\{[^}]+\}", r"[^/]+", template)
        if re.fullmatch(pattern, path) and method.lower() in item:
            return template, item[method.lower()]
    raise AssertionError(f"{method} {path} is not in the document")


def conforms(document: Document, answer: httpx.Response) -> httpx.Response:
    """Check ``answer`` against its operation's documented answers; return it."""
    request = answer.request
    template, operation = _operation(document, request.method, str(request.url))
    where = f"{request.method} {template} -> {answer.status_code}"
    documented = operation["responses"].get(str(answer.status_code))
    assert documented is not None, f"{where}: status not documented"
    for header in ("Location", "Retry-After"):
        if header in answer.headers:
            assert header in documented.get("headers", {}), f"{where}: {header} not documented"
    media_type = answer.headers.get("content-type", "").split(";")[0]
    content = documented.get("content", {})
    if not content:
        assert not answer.content, f"{where}: a body where none is documented"
        return answer
    assert media_type in content, f"{where}: {media_type} not documented ({list(content)})"
    schema = content[media_type].get("schema")
    if schema is not None:
        root = {**schema, "components": document["components"]}
        jsonschema.Draft202012Validator(root).validate(answer.json())
    return answer


@pytest.fixture
def checked(document: Document) -> Callable[[httpx.Response], httpx.Response]:
    return lambda answer: conforms(document, answer)


def test_a_job_s_whole_life_is_answered_as_documented(
    checked: Callable[[httpx.Response], httpx.Response], producer: Api, worker: Api, admin: Api
) -> None:
    first = checked(producer.post("/jobs", json={"type": "noop", "idempotency_key": "k1"}))
    assert first.status_code == 201
    again = checked(producer.post("/jobs", json={"type": "noop", "idempotency_key": "k1"}))
    assert again.status_code == 200
    checked(producer.post("/jobs/batch", json={"jobs": [{"type": "noop"}, {"type": "noop"}]}))
    checked(producer.get("/jobs", params={"limit": 1}))
    checked(producer.get(f"/jobs/{first.json()['id']}"))
    held = checked(worker.post("/jobs/claim", json={"limit": 3})).json()["jobs"]
    assert len(held) == 3
    token = {"lease_token": held[0]["lease_token"]}
    checked(worker.post(f"/jobs/{held[0]['id']}/heartbeat", json=token))
    checked(worker.post(f"/jobs/{held[0]['id']}/complete", json={**token, "result": {"ok": 1}}))
    failing = {"lease_token": held[1]["lease_token"], "error": "boom", "retryable": False}
    checked(worker.post(f"/jobs/{held[1]['id']}/fail", json=failing))
    checked(worker.post(f"/jobs/{held[2]['id']}/release", json={"lease_token": "stale"}))
    checked(admin.get(f"/jobs/{held[1]['id']}"))  # failed: its error shown to an admin
    checked(admin.get(f"/jobs/{held[1]['id']}/events"))
    checked(admin.post(f"/jobs/{held[1]['id']}/retry"))
    checked(producer.post(f"/jobs/{held[1]['id']}/cancel"))
    again_held = checked(worker.post("/jobs/claim", json={"limit": 2})).json()["jobs"]
    items = [{"id": j["id"], "lease_token": j["lease_token"]} for j in again_held]
    items.append({"id": 10**12, "lease_token": "t"})
    checked(worker.post("/jobs/batch/complete", json={"items": items}))
    minimal = {"Prefer": "return=minimal"}
    checked(worker.post("/jobs/batch/complete", json={"items": items}, headers=minimal))


def test_keys_and_operations_are_answered_as_documented(
    checked: Callable[[httpx.Response], httpx.Response], admin: Api, anonymous: Api
) -> None:
    made = checked(admin.post("/keys", json={"name": "ci", "roles": ["worker"], "types": None}))
    checked(admin.get("/keys"))
    assert checked(admin.delete(f"/keys/{made.json()['id']}")).status_code == 204
    for path in ("/healthz", "/readyz"):
        checked(anonymous.get(path))
    checked(admin.get("/stats"))


def test_every_kind_of_refusal_is_documented_problem_json(
    checked: Callable[[httpx.Response], httpx.Response],
    producer: Api,
    worker: Api,
    anonymous: Api,
) -> None:
    refusals = [
        (anonymous.post("/jobs", json={"type": "noop"}), 401),
        (producer.post("/jobs/claim", json={}), 403),
        (producer.get("/jobs/999999"), 404),
        (producer.get("/jobs/0"), 422),  # a path parameter out of range
        (producer.get("/jobs", params={"cursor": "not-a-job-id"}), 422),
        (producer.post("/jobs", json={"type": "unconfigured"}), 422),
        (producer.post("/jobs", content=b"{}", headers={"Content-Type": "text/plain"}), 415),
        (producer.post("/jobs", content=b"x" * 2_000_000), 413),
        # A route that takes no body still checks one's media type.
        (
            producer.post("/jobs/1/cancel", content=b"x", headers={"Content-Type": "text/plain"}),
            415,
        ),
        (worker.post("/jobs/1/complete", json={"lease_token": "t"}), 404),
    ]
    for answer, status in refusals:
        assert checked(answer).status_code == status, answer.text
        assert answer.headers["content-type"] == "application/problem+json"


def test_every_answer_that_says_when_to_send_again_documents_retry_after(
    document: Document,
) -> None:
    for path, item in document["paths"].items():
        for method, operation in item.items():
            for status in ("429", "503", "507"):
                answer = operation["responses"].get(status)
                if answer is not None:
                    assert "Retry-After" in answer.get("headers", {}), (method, path, status)


def test_no_error_answer_is_documented_as_anything_but_a_problem(document: Document) -> None:
    for path, item in document["paths"].items():
        for method, operation in item.items():
            for status, answer in operation["responses"].items():
                if int(status) >= 400:
                    assert list(answer["content"]) == ["application/problem+json"], (
                        method,
                        path,
                        status,
                    )
    assert "HTTPValidationError" not in document["components"]["schemas"]


def test_the_job_types_a_request_may_name_are_the_configured_ones(document: Document) -> None:
    schemas = document["components"]["schemas"]
    configured = sorted(TYPES)
    assert schemas["EnqueueRequest"]["properties"]["type"]["enum"] == configured
    claim_types = schemas["ClaimRequest"]["properties"]["types"]["anyOf"][0]["items"]
    assert claim_types["enum"] == configured
    key_types = schemas["KeyCreateRequest"]["properties"]["types"]["anyOf"][0]["items"]
    assert key_types["enum"] == configured
    assert schemas["ScheduleCreateRequest"]["properties"]["type"]["enum"] == configured


def test_operations_are_named_after_their_endpoints(document: Document) -> None:
    names = [op["operationId"] for item in document["paths"].values() for op in item.values()]
    assert len(names) == len(set(names))
    assert {"enqueue", "claim", "complete_batch", "get_job"} <= set(names)


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("OPTIONS", "/keys", "GET, POST"),
        ("PUT", "/jobs", "GET, POST"),
        ("DELETE", "/jobs/5", "GET"),
        ("GET", "/jobs/claim", "POST"),
        ("POST", "/healthz", "GET, HEAD"),  # the routes that answer HEAD name it
        ("DELETE", "/ui/jobs", "GET, HEAD"),
        ("PUT", "/ui/login", "GET, HEAD, POST"),
    ],
)
def test_a_method_the_path_lacks_is_405_naming_every_method_it_has(
    producer: Api, method: str, path: str, allowed: str
) -> None:
    answer = producer.request(method, path)
    assert answer.status_code == 405
    assert answer.headers["allow"] == allowed
    assert answer.headers["content-type"] == "application/problem+json"


@pytest.mark.parametrize(
    ("limit", "status"), [(2, 200), (2.0, 200), (2.5, 422), ("2", 422), (True, 422)]
)
def test_an_integer_is_a_json_number_without_a_fraction(
    producer: Api, worker: Api, limit: object, status: int
) -> None:
    producer.post("/jobs/batch", json={"jobs": [{"type": "noop"}, {"type": "noop"}]})
    answer = worker.post("/jobs/claim", json={"limit": limit})
    assert answer.status_code == status, answer.text
    if status == 200:
        assert len(answer.json()["jobs"]) == 2


@pytest.mark.parametrize("run_at", [0, "0", "2031-05-01", "2031-05-01T10:00:00"])
def test_a_time_is_an_rfc3339_string_with_its_zone(producer: Api, run_at: object) -> None:
    answer = producer.post("/jobs", json={"type": "noop", "run_at": run_at})
    assert answer.status_code == 422, answer.text
    assert (
        producer.post("/jobs", json={"type": "noop", "run_at": "2031-05-01T10:00:00Z"}).status_code
        == 201
    )


def test_the_flow_schedule_and_result_routes_are_answered_as_documented(
    checked: Callable[[httpx.Response], httpx.Response], producer: Api, worker: Api, admin: Api
) -> None:
    checked(admin.get("/types"))
    checked(admin.post("/types/noop/pause"))
    checked(admin.post("/types/noop/resume"))
    assert checked(admin.post("/types/nope/pause")).status_code == 404
    every_minute = {"name": "s1", "type": "noop", "every_seconds": 60}
    assert checked(admin.post("/schedules", json=every_minute)).status_code == 201
    assert checked(admin.post("/schedules", json=every_minute)).status_code == 409
    checked(admin.get("/schedules"))
    for action in ("pause", "resume", "trigger"):
        checked(admin.post(f"/schedules/s1/{action}"))
    assert checked(admin.delete("/schedules/s1")).status_code == 204
    assert checked(admin.get("/schedules/s1")).status_code == 404
    unique = {"type": "noop", "unique_key": "u1", "group": "g1"}
    job = checked(producer.post("/jobs", json=unique)).json()
    assert checked(producer.post("/jobs", json=unique)).status_code == 200
    (held,) = checked(worker.post("/jobs/claim", json={})).json()["jobs"]
    token = held["lease_token"]
    report = {"lease_token": token, "progress": {"done": 1}}
    checked(worker.post(f"/jobs/{held['id']}/heartbeat", json=report))
    snooze = {"lease_token": token, "delay_seconds": 5}
    checked(worker.post(f"/jobs/{held['id']}/release", json=snooze))
    checked(producer.get(f"/jobs/{job['id']}", params={"wait_seconds": 0}))


def test_the_workflow_routes_are_answered_as_documented(
    checked: Callable[[httpx.Response], httpx.Response], producer: Api, worker: Api, admin: Api
) -> None:
    first = checked(producer.post("/jobs", json={"type": "noop"})).json()
    waiting = {"type": "noop", "depends_on": [first["id"]], "on_dependency_failure": "run"}
    second = checked(producer.post("/jobs", json=waiting)).json()
    assert second["status"] == "waiting"
    graph = {"jobs": [{"type": "noop"}, {"type": "noop", "depends_on_items": [0]}]}
    checked(producer.post("/jobs/batch", json=graph))
    checked(producer.get("/jobs", params={"depends_on": first["id"]}))
    checked(producer.get(f"/jobs/{second['id']}/dependencies"))
    checked(admin.get(f"/jobs/{second['id']}/events"))
    refusals = [
        producer.post("/jobs", json={"type": "noop", "depends_on": [10**9]}),
        producer.post("/jobs", json={"type": "noop", "depends_on": [1, 1]}),
        producer.post("/jobs/batch", json={"jobs": [{"type": "noop", "depends_on_items": [0]}]}),
        producer.get("/jobs", params={"depends_on": 0}),
    ]
    for answer in refusals:
        assert checked(answer).status_code == 422, answer.text
    assert checked(worker.get(f"/jobs/{second['id']}/dependencies")).status_code == 404
    assert checked(producer.post(f"/jobs/{second['id']}/cancel")).status_code == 200


def test_the_dependency_fields_carry_their_constraints(document: Document) -> None:
    schemas = document["components"]["schemas"]
    depends_on = schemas["EnqueueRequest"]["properties"]["depends_on"]["anyOf"][0]
    assert depends_on["maxItems"] == 100 and depends_on["uniqueItems"] is True
    assert depends_on["items"]["minimum"] == 1
    item = schemas["BatchEnqueueItem"]["properties"]
    assert item["type"]["enum"] == sorted(TYPES)
    assert item["depends_on_items"]["anyOf"][0]["uniqueItems"] is True
    mode = schemas["EnqueueRequest"]["properties"]["on_dependency_failure"]["anyOf"][0]
    assert mode["enum"] == ["cancel", "run"]
    assert "waiting" in schemas["JobOut"]["properties"]["status"]["enum"]
    assert "depends_on" in schemas["JobOut"]["required"]


def _integer_schemas(node: Any) -> list[Document]:
    found: list[Document] = []
    if isinstance(node, list):
        for item in node:
            found += _integer_schemas(item)
    elif isinstance(node, dict):
        if node.get("type") == "integer":
            found.append(node)
        for child in node.values():
            found += _integer_schemas(child)
    return found


def test_an_integer_s_bounds_are_exact_integers(document: Document) -> None:
    """An id's bound is 2^63 - 1 everywhere: a batch item's `depends_on` published
    2^63 as a float, an id the server refuses."""
    bounded = [s for s in _integer_schemas(document) if "maximum" in s or "minimum" in s]
    assert bounded
    for schema in bounded:
        for bound in ("minimum", "maximum"):
            assert isinstance(schema.get(bound, 0), int), schema
    item = document["components"]["schemas"]["BatchEnqueueItem"]["properties"]["depends_on"]
    assert item["anyOf"][0]["items"]["maximum"] == 2**63 - 1
