"""End-to-end against a real server process: exactly-once claims over HTTP, the CLI."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.realserver import RealServer, closing

pytestmark = pytest.mark.slow

TYPES = {"noop": {"max_retries": 3, "lease_seconds": 30}, "send_email": {"max_retries": 5}}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RealServer]:
    """A configured, not yet started server; always stopped at teardown."""
    with closing(RealServer(tmp_path, types=TYPES)) as real:
        yield real


def test_many_threads_claiming_over_http_get_each_job_exactly_once(server: RealServer) -> None:
    producer_key = server.create_key("shop", "producer")
    worker_keys = [server.create_key(f"w{i}", "worker") for i in range(4)]
    server.start()
    with server.client(producer_key) as producer:
        for _ in range(6):
            batch = {"jobs": [{"type": "noop", "payload": {"i": i}} for i in range(100)]}
            assert producer.post("/jobs/batch", json=batch).status_code == 200
    claims: list[tuple[int, str]] = []
    errors: list[str] = []
    lock = threading.Lock()
    barrier = threading.Barrier(16)

    def drain(key: str, instance: str) -> None:
        with server.client(key) as api:
            barrier.wait(timeout=30)
            for _ in range(1000):
                body = {"limit": 3, "instance": instance}
                response = api.post("/jobs/claim", json=body)
                if response.status_code != 200:
                    errors.append(response.text)
                    return
                jobs = response.json()["jobs"]
                if not jobs:
                    return
                for job in jobs:
                    done = api.post(
                        f"/jobs/{job['id']}/complete", json={"lease_token": job["lease_token"]}
                    )
                    if done.status_code != 200:
                        errors.append(done.text)
                with lock:
                    claims.extend((j["id"], j["lease_token"]) for j in jobs)

    threads = [
        threading.Thread(target=drain, args=(worker_keys[i % 4], f"t{i}")) for i in range(16)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors
    ids = [job_id for job_id, _ in claims]
    assert len(ids) == 600 and len(set(ids)) == 600
    admin_key = server.create_key("root", "admin")
    with server.client(admin_key) as admin:
        by_status = admin.get("/stats").json()["by_status"]
        assert by_status["completed"] == 600 and sum(by_status.values()) == 600


def test_serve_bootstraps_one_admin_key_on_an_empty_database(server: RealServer) -> None:
    server.start()
    lines = server.log().splitlines()
    assert "No active admin key" in lines[0]
    key = lines[1].strip()
    assert key.startswith("ql_")
    with server.client(key) as admin:
        keys = admin.get("/keys").json()["keys"]
        assert [(k["name"], k["roles"]) for k in keys] == [("admin", ["admin"])]
    server.terminate()
    server.start()  # the same database: its admin key is found
    assert "admin key" not in server.log() and "ql_" not in server.log()


@pytest.mark.parametrize("durability", ["full", "normal"])
def test_serve_says_the_durability_the_database_reports(tmp_path: Path, durability: str) -> None:
    with closing(RealServer(tmp_path, types=TYPES, config={"durability": durability})) as real:
        real.start()
        assert f", durability: {durability})" in real.log()


def test_keys_cli_creates_lists_and_revokes(server: RealServer) -> None:
    assert server.cli("migrate").returncode == 0
    key = server.create_key("shop", "producer", "worker", max_priority="high")
    listed = server.cli("keys", "list")
    assert listed.returncode == 0
    assert "shop\tproducer,worker\thigh\t*" in listed.stdout and key not in listed.stdout
    key_id = listed.stdout.split("\t")[0]
    server.start()
    # --json prints the keys exactly as an admin reads them through the API.
    admin_key = server.create_key("root", "admin")
    as_json = server.cli("keys", "list", "--json")
    with server.client(admin_key) as admin:
        assert json.loads(as_json.stdout) == admin.get("/keys").json()
    with server.client(key) as api:
        assert api.get("/jobs").status_code == 200
        revoked = server.cli("keys", "revoke", key_id)
        assert revoked.returncode == 0
        # Another process revoked it: this server notices within its one-second cache.
        for _ in range(50):
            if api.get("/jobs").status_code == 401:
                break
            threading.Event().wait(0.1)
        assert api.get("/jobs").status_code == 401
    server.terminate()
    again = server.cli("keys", "revoke", key_id)
    assert again.returncode != 0 and "no active key" in again.stderr


def test_keys_cli_rejects_unknown_roles_and_types(server: RealServer) -> None:
    bad_role = server.cli("keys", "create", "--name", "x", "--role", "root")
    assert bad_role.returncode != 0
    bad_type = server.cli("keys", "create", "--name", "x", "--role", "worker", "--type", "nope")
    assert bad_type.returncode != 0 and "not configured" in bad_type.stderr


def test_keys_cli_refuses_the_names_the_api_refuses(server: RealServer) -> None:
    # A name is the principal and the worker id's first part: "w/x" would read as w + x.
    for name in ["", "w/x", "has space", "x" * 65, "<b>"]:
        done = server.cli("keys", "create", "--name", name, "--role", "worker")
        assert done.returncode == 2, (name, done.stdout)
        assert "Traceback" not in done.stderr
    assert server.cli("keys", "list").stdout.strip() == ""


def test_readyz_and_unknown_routes_over_http(server: RealServer) -> None:
    server.start()
    assert httpx.get(f"{server.url}/readyz").json() == {"status": "ready"}
    missing = httpx.get(f"{server.url}/nope")
    assert missing.status_code == 404
    assert missing.headers["content-type"] == "application/problem+json"
