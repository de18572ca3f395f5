"""Who may call what: 401 without a valid key, 403 without the role."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient

from queuelog.auth import generate_key
from tests.conftest import Api, claim_one, enqueue

# (method, path, body, roles that may call it)
ROUTES: list[tuple[str, str, dict[str, object] | None, set[str]]] = [
    ("POST", "/jobs", {"type": "noop"}, {"producer"}),
    ("POST", "/jobs/batch", {"jobs": [{"type": "noop"}]}, {"producer"}),
    ("GET", "/jobs", None, {"producer", "worker", "admin"}),
    ("GET", "/jobs/1", None, {"producer", "worker", "admin"}),
    ("GET", "/jobs/1/events", None, {"producer", "worker", "admin"}),
    ("GET", "/jobs/1/dependencies", None, {"producer", "worker", "admin"}),
    ("POST", "/jobs/claim", {}, {"worker"}),
    ("POST", "/jobs/1/heartbeat", {"lease_token": "t"}, {"worker"}),
    ("POST", "/jobs/1/release", {"lease_token": "t"}, {"worker"}),
    ("POST", "/jobs/1/complete", {"lease_token": "t"}, {"worker"}),
    ("POST", "/jobs/1/fail", {"lease_token": "t", "error": "e"}, {"worker"}),
    ("POST", "/jobs/batch/complete", {"items": [{"id": 1, "lease_token": "t"}]}, {"worker"}),
    ("POST", "/jobs/1/cancel", None, {"producer", "admin"}),
    ("POST", "/jobs/1/retry", None, {"admin"}),
    ("POST", "/keys", {"name": "k", "roles": ["worker"]}, {"admin"}),
    ("GET", "/keys", None, {"admin"}),
    ("DELETE", "/keys/999", None, {"admin"}),
    ("POST", "/schedules", {"name": "s", "every_seconds": 60, "type": "noop"}, {"admin"}),
    ("GET", "/schedules", None, {"admin"}),
    ("GET", "/schedules/s", None, {"admin"}),
    ("DELETE", "/schedules/s", None, {"admin"}),
    ("POST", "/schedules/s/pause", None, {"admin"}),
    ("POST", "/schedules/s/resume", None, {"admin"}),
    ("POST", "/schedules/s/trigger", None, {"admin"}),
    ("GET", "/types", None, {"admin"}),
    ("POST", "/types/noop/pause", None, {"admin"}),
    ("POST", "/types/noop/resume", None, {"admin"}),
    ("GET", "/stats", None, {"admin"}),
    ("GET", "/metrics", None, {"admin"}),
]
ROLES = ["producer", "worker", "admin"]


def _call(api: Api, method: str, path: str, body: dict[str, object] | None) -> int:
    kwargs = {"json": body} if body is not None else {}
    status: int = api.request(method, path, **kwargs).status_code
    return status


@pytest.mark.parametrize(("method", "path", "body", "allowed"), ROUTES)
@pytest.mark.parametrize("role", ROLES)
def test_role_matrix(
    as_key: Callable[..., Api],
    role: str,
    method: str,
    path: str,
    body: dict[str, object] | None,
    allowed: set[str],
) -> None:
    status = _call(as_key(f"{role}-key", role), method, path, body)
    if role in allowed:
        assert status not in (401, 403), (role, method, path, status)
    else:
        assert status == 403, (role, method, path, status)


@pytest.mark.parametrize(("method", "path", "body", "allowed"), ROUTES)
def test_every_route_needs_a_key(
    anonymous: Api, method: str, path: str, body: dict[str, object] | None, allowed: set[str]
) -> None:
    response = anonymous.request(method, path, **({"json": body} if body is not None else {}))
    assert response.status_code == 401
    assert response.json()["type"] == "unauthenticated"
    assert response.headers["content-type"] == "application/problem+json"
    assert response.headers["www-authenticate"].startswith("Bearer")


@pytest.mark.parametrize(
    "header",
    [
        "Bearer",
        "Bearer not-a-key",
        "Basic dXNlcjpwYXNz",
        f"Bearer {generate_key()}",  # well formed, unknown
        f"Bearer {generate_key()[:-1]}x",  # bad checksum
    ],
)
def test_malformed_or_unknown_keys_are_401(client: TestClient, header: str) -> None:
    response = client.get("/jobs", headers={"Authorization": header})
    assert response.status_code == 401 and response.json()["type"] == "unauthenticated"


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [("GET", "/jobs", None), ("POST", "/jobs", {"type": "noop"}), ("POST", "/jobs/claim", {})],
)
def test_hardening_24_two_authorization_headers_are_401(
    admin: Api, client: TestClient, method: str, path: str, body: dict[str, object] | None
) -> None:
    # Two keys that would each be let in: neither is, whichever a proxy would have read.
    keys = [
        admin.post("/keys", json={"name": f"k{n}", "roles": ["producer", "worker"]}).json()
        for n in range(2)
    ]
    headers = [("Authorization", f"Bearer {k['key']}") for k in keys]
    response = client.request(method, path, headers=headers, json=body)
    assert response.status_code == 401, response.text
    assert response.json()["detail"] == "Send one Authorization header, not several"
    one = client.request(method, path, headers=headers[:1], json=body)
    assert one.status_code in {200, 201}, one.text


def test_revoked_key_is_401_at_once(admin: Api, client: TestClient) -> None:
    created = admin.post("/keys", json={"name": "temp", "roles": ["producer"]}).json()
    key = Api(client, created["key"])
    assert key.get("/jobs").status_code == 200
    assert admin.delete(f"/keys/{created['id']}").status_code == 204
    assert key.get("/jobs").status_code == 401


def test_public_routes_need_no_key(anonymous: Api) -> None:
    for path in ["/healthz", "/readyz", "/openapi.json", "/docs"]:
        assert anonymous.get(path).status_code == 200, path


def _new_key(admin: Api, client: TestClient, name: str, role: str) -> tuple[Api, int]:
    created = admin.post("/keys", json={"name": name, "roles": [role]}).json()
    return Api(client, created["key"]), int(created["id"])


def _revoked_meanwhile(
    admin: Api, key_id: int, request: Callable[[], Any], then: Callable[[], Any]
) -> Any:
    """The answer to ``request()``, sent on a thread, when its key is revoked while it
    waits and ``then()`` runs after the revoke."""
    answers: list[Any] = []
    thread = threading.Thread(target=lambda: answers.append(request()), daemon=True)
    thread.start()
    time.sleep(0.3)  # the request waits by now (if not, it meets the revoke at once)
    assert admin.delete(f"/keys/{key_id}").status_code == 204
    then()
    thread.join(timeout=30)
    (answer,) = answers
    return answer


def test_hardening_11_a_claim_waiting_when_its_key_is_revoked_is_401_and_holds_nothing(
    admin: Api, producer: Api, client: TestClient
) -> None:
    leaving, key_id = _new_key(admin, client, "leaving", "worker")
    body = {"wait_seconds": 20, "linger_ms": 50}
    made: list[dict[str, Any]] = []
    answer = _revoked_meanwhile(
        admin,
        key_id,
        lambda: leaving.post("/jobs/claim", json=body),
        lambda: made.append(enqueue(producer)),
    )
    assert answer.status_code == 401 and answer.json()["type"] == "unauthenticated"
    # It took nothing (had it woken before the revoke, it would have given the job back,
    # the attempt not spent): another worker takes the job.
    (job,) = made
    held = admin.get(f"/jobs/{job['id']}").json()
    assert held["status"] == "pending" and held["retry_count"] == 0
    staying, _ = _new_key(admin, client, "staying", "worker")
    assert claim_one(staying)["id"] == job["id"]


def test_hardening_11_a_lingering_claim_whose_key_is_revoked_gives_back_what_it_held(
    admin: Api, producer: Api, client: TestClient
) -> None:
    leaving, key_id = _new_key(admin, client, "leaving", "worker")
    first = enqueue(producer)
    body = {"limit": 5, "linger_ms": 1000}  # holds the first job, lingers for more
    made: list[dict[str, Any]] = []
    answer = _revoked_meanwhile(
        admin,
        key_id,
        lambda: leaving.post("/jobs/claim", json=body),
        lambda: made.append(enqueue(producer)),  # wakes the claim: its key is revoked
    )
    assert answer.status_code == 401
    for job in (first, *made):
        events = admin.get(f"/jobs/{job['id']}/events").json()["events"]
        assert admin.get(f"/jobs/{job['id']}").json()["status"] == "pending"
        assert [e["event"] for e in events] in (["enqueued"], ["enqueued", "claimed", "released"])


def test_hardening_11_a_result_awaited_when_its_key_is_revoked_is_401(
    admin: Api, client: TestClient
) -> None:
    gone, key_id = _new_key(admin, client, "gone", "producer")
    job = enqueue(gone)
    answer = _revoked_meanwhile(
        admin,
        key_id,
        lambda: gone.get(f"/jobs/{job['id']}?wait_seconds=20"),
        lambda: admin.post(f"/jobs/{job['id']}/cancel"),
    )
    assert answer.status_code == 401 and "cancelled" not in answer.text
