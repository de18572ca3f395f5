"""Shared fixtures: settings, a fake clock, real storage (SQLite, PostgreSQL), an app."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import pytest
from fastapi.testclient import TestClient

from queuelog.api.app import create_app
from queuelog.auth import KeyRing
from queuelog.clock import FakeClock
from queuelog.config import Settings
from queuelog.models import ApiKey, Priority, Role
from queuelog.service import JobService
from queuelog.storage.postgres.store import PostgresStorage
from queuelog.storage.protocol import Storage
from queuelog.storage.sqlite.store import SqliteStorage
from tests.postgres import fresh_schema
from tests.spans import InMemorySpanExporter, recording

TYPES: dict[str, Any] = {
    "send_email": {
        "max_retries": 5,
        "lease_seconds": 30,
        "backoff_base_seconds": 2,
        "backoff_cap_seconds": 3600,
        "payload_schema": {
            "type": "object",
            "required": ["to"],
            "properties": {"to": {"type": "string"}},
        },
    },
    "resize_image": {"max_retries": 2, "lease_seconds": 60},
    "noop": {},
}


def make_settings(tmp_path: Path, **overrides: Any) -> Settings:
    data: dict[str, Any] = {
        "database": f"sqlite:///{tmp_path / 'queuelog.db'}",
        "types": TYPES,
        "limits": {"rate_per_second": 0},
    }
    data.update(overrides)
    return Settings.model_validate(data)


@pytest.fixture
def anyio_backend() -> str:
    """Async tests (``pytest.mark.anyio``) run on asyncio, as the server does."""
    return "asyncio"


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return make_settings(tmp_path)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(params=["sqlite", "postgres"])
def storage(request: pytest.FixtureRequest, settings: Settings) -> Iterator[Storage]:
    """Real storage of each backend: SQLite in a temp file, PostgreSQL in a fresh schema."""
    if request.param == "postgres":
        with fresh_schema() as url:
            pg = PostgresStorage(url)
            yield pg
            pg.close()
        return
    path = settings.sqlite_path
    assert path is not None
    store = SqliteStorage(path)
    yield store
    store.close()


@pytest.fixture
def service(storage: SqliteStorage, settings: Settings, clock: FakeClock) -> JobService:
    return JobService(storage, settings, clock)


KeyMaker = Callable[..., tuple[ApiKey, str]]
T = TypeVar("T")


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The spans this process ends during the test (OpenTelemetry's SDK, in memory)."""
    with recording() as exporter:
        yield exporter


def run_blocking(work: Coroutine[Any, Any, T]) -> T:
    """Run ``work`` to its end from plain code: on an event loop of its own, in a thread
    of its own when the caller is itself inside a running loop (an async test)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(work)
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, work).result()


@pytest.fixture
def make_key(storage: SqliteStorage, clock: FakeClock) -> KeyMaker:
    """Create a key in storage: ``make_key("name", "producer", max_priority="high")``."""
    ring = KeyRing(storage, clock)

    def make(
        name: str,
        *roles: str,
        max_priority: str = "medium",
        types: tuple[str, ...] | None = None,
    ) -> tuple[ApiKey, str]:
        made = ring.create(
            name, frozenset(Role(r) for r in roles), Priority.from_label(max_priority), types
        )
        return run_blocking(made)

    return make


class Api:
    """A TestClient bound to one key: ``api.post("/jobs", json=...)``."""

    def __init__(self, client: TestClient, key: str | None) -> None:
        self.client = client
        self.headers = {"Authorization": f"Bearer {key}"} if key else {}

    def request(self, method: str, url: str, **kwargs: Any) -> Any:
        headers = {**self.headers, **kwargs.pop("headers", {})}
        return self.client.request(method, url, headers=headers, **kwargs)

    def get(self, url: str, **kwargs: Any) -> Any:
        return self.request("GET", url, **kwargs)

    def post(self, url: str, **kwargs: Any) -> Any:
        return self.request("POST", url, **kwargs)

    def delete(self, url: str, **kwargs: Any) -> Any:
        return self.request("DELETE", url, **kwargs)


@pytest.fixture
def client(settings: Settings, storage: SqliteStorage, clock: FakeClock) -> Iterator[TestClient]:
    app = create_app(settings, storage=storage, clock=clock, run_maintenance=False)
    with TestClient(app, raise_server_exceptions=False) as test_client:
        yield test_client


@pytest.fixture
def as_key(client: TestClient, make_key: KeyMaker) -> Callable[..., Api]:
    """``as_key("alice", "producer")``: an Api client holding a new key with those roles."""

    def bind(name: str, *roles: str, **options: Any) -> Api:
        _, plaintext = make_key(name, *roles, **options)
        return Api(client, plaintext)

    return bind


@pytest.fixture
def producer(as_key: Callable[..., Api]) -> Api:
    return as_key("shop", "producer", max_priority="high")


@pytest.fixture
def worker(as_key: Callable[..., Api]) -> Api:
    return as_key("mailer", "worker")


@pytest.fixture
def admin(as_key: Callable[..., Api]) -> Api:
    return as_key("root", "admin")


@pytest.fixture
def anonymous(client: TestClient) -> Api:
    return Api(client, None)


def enqueue(api: Api, job_type: str = "noop", **body: Any) -> dict[str, Any]:
    response = api.post("/jobs", json={"type": job_type, **body})
    assert response.status_code == 201, response.text
    data: dict[str, Any] = response.json()
    return data


def claim_one(api: Api, **body: Any) -> dict[str, Any]:
    response = api.post("/jobs/claim", json=body)
    assert response.status_code == 200, response.text
    jobs = response.json()["jobs"]
    assert len(jobs) == 1, jobs
    job: dict[str, Any] = jobs[0]
    return job
