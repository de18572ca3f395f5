"""Admin key management."""

from __future__ import annotations

from fastapi.testclient import TestClient

from queuelog.auth import looks_like_key
from tests.conftest import Api


def test_create_shows_the_key_once(admin: Api, client: TestClient) -> None:
    body = {"name": "shop", "roles": ["producer"], "max_priority": "HIGH", "types": ["noop"]}
    response = admin.post("/keys", json=body)
    assert response.status_code == 201
    created = response.json()
    assert looks_like_key(created["key"]) and created["key"].startswith("ql_")
    assert created["roles"] == ["producer"] and created["max_priority"] == "high"
    assert created["types"] == ["noop"] and created["key"].startswith(created["prefix"])
    listed = admin.get("/keys").json()["keys"]
    assert all("key" not in k and "key_hash" not in k for k in listed)
    assert created["key"] not in admin.get("/keys").text
    assert Api(client, created["key"]).get("/jobs").status_code == 200


def test_create_defaults_to_medium_and_all_types(admin: Api) -> None:
    created = admin.post("/keys", json={"name": "w", "roles": ["worker", "producer"]}).json()
    assert created["max_priority"] == "medium" and created["types"] is None
    assert created["roles"] == ["producer", "worker"]


def test_create_with_bad_fields_is_422(admin: Api) -> None:
    for body in [
        {"name": "x", "roles": []},
        {"name": "x", "roles": ["root"]},
        {"name": "has/slash", "roles": ["worker"]},
        {"name": "", "roles": ["worker"]},
        {"name": "x", "roles": ["worker"], "max_priority": "urgent"},
        {"name": "x", "roles": ["worker"], "secret": "mine"},
        {"name": "x", "roles": ["worker"], "types": []},  # a key for nothing: omit for all
    ]:
        response = admin.post("/keys", json=body)
        assert response.status_code == 422, body
        assert response.json()["type"] == "validation"


def test_a_key_s_types_are_stored_once_each(admin: Api) -> None:
    body = {"name": "x", "roles": ["worker"], "types": ["noop", "send_email", "noop"]}
    created = admin.post("/keys", json=body).json()
    assert created["types"] == ["noop", "send_email"]


def test_create_with_unknown_type_is_422(admin: Api) -> None:
    response = admin.post("/keys", json={"name": "x", "roles": ["worker"], "types": ["nope"]})
    assert response.status_code == 422 and response.json()["type"] == "unknown-job-type"


def test_revoke_unknown_or_revoked_key_is_404(admin: Api) -> None:
    assert admin.delete("/keys/12345").status_code == 404
    created = admin.post("/keys", json={"name": "t", "roles": ["worker"]}).json()
    assert admin.delete(f"/keys/{created['id']}").status_code == 204
    response = admin.delete(f"/keys/{created['id']}")
    assert response.status_code == 404 and response.json()["type"] == "not-found"
    listed = {k["id"]: k for k in admin.get("/keys").json()["keys"]}
    assert listed[created["id"]]["revoked_at"] is not None
