"""A database that a node of an older version wrote to as well: what the newer store
makes of the rows that version left, on both backends."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import psycopg
import pytest

from queuelog.storage.postgres.store import PostgresStorage
from queuelog.storage.protocol import Storage
from queuelog.storage.sqlfile import load_migrations
from queuelog.storage.sqlite.store import SqliteStorage
from tests.conftest import run_blocking
from tests.postgres import fresh_schema
from tests.storage.backends import BACKENDS
from tests.storage.test_conformance import claim, finish
from tests.storage.test_unique_jobs import one, unique

# Runs SQL as a node of another version would, on the store's database.
RunSql = Callable[[str], None]


@contextmanager
def database(backend: str, directory: Path) -> Iterator[tuple[Callable[[], Storage], RunSql]]:
    """An empty database of ``backend``: a way to open the store on it (migrating it),
    and one to run SQL on it outside the store."""
    if backend == "sqlite":
        path = directory / "shared.db"

        def run_sqlite(sql: str) -> None:
            with sqlite3.connect(path, isolation_level=None) as conn:
                conn.executescript(sql)

        yield (lambda: SqliteStorage(path)), run_sqlite
    else:
        with fresh_schema() as url:

            def run_postgres(sql: str) -> None:
                with psycopg.connect(url, autocommit=True) as conn:
                    conn.execute(sql.encode())  # no parameters: several statements

            yield (lambda: PostgresStorage(url)), run_postgres


def migrated_before(run_sql: RunSql, backend: str, version: int) -> None:
    """The schema as a version that knew the migrations before ``version`` left it."""
    run_sql("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY);")
    for number, sql in load_migrations(f"queuelog.storage.{backend}"):
        if number < version:
            run_sql(sql)
            run_sql(f"INSERT INTO schema_migrations VALUES ({number});")


def pruned_as_before_0012(run_sql: RunSql, job_id: int) -> None:
    """What a node older than migration 0012 deletes to prune a finished job."""
    run_sql(f"DELETE FROM job_events WHERE job_id = {job_id};")
    run_sql(f"DELETE FROM job_dependencies WHERE job_id = {job_id};")
    run_sql(f"DELETE FROM jobs WHERE id = {job_id};")


KEYED = replace(unique(), idempotency_key="k-1", fingerprint="f-1")


@pytest.mark.parametrize("backend", BACKENDS)
def test_hardening_42_a_key_whose_job_an_older_node_pruned_is_free_again(
    backend: str, tmp_path: Path
) -> None:
    """A unique key's holder settled a keyed request, and an older node pruned the
    holder, not knowing the key that names it: the request sent again makes a job, as
    after any pruning, instead of failing for good."""
    with database(backend, tmp_path) as (open_store, run_sql):
        store = open_store()
        try:
            holder, _ = run_blocking(one(store, unique()))
            assert run_blocking(one(store, KEYED)) == (holder, False)  # settled by the holder
            (running,) = run_blocking(claim(store))
            run_blocking(finish(store, running))
            pruned_as_before_0012(run_sql, holder)
            again, created = run_blocking(one(store, KEYED))
            assert created and again != holder
            assert run_blocking(one(store, KEYED)) == (again, False)
        finally:
            store.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_hardening_42_keys_left_naming_pruned_jobs_are_freed_by_the_upgrade(
    backend: str, tmp_path: Path
) -> None:
    """Keys an older node left naming jobs it pruned, before migration 0016: the
    upgrade deletes them, and their requests make jobs again."""
    with database(backend, tmp_path) as (open_store, run_sql):
        migrated_before(run_sql, backend, 16)
        run_sql(
            "INSERT INTO idempotency_keys (principal, idempotency_key, fingerprint, job_id)"
            " VALUES ('shop', 'k-1', 'f-1', 7);"
        )
        store = open_store()
        try:
            made, created = run_blocking(one(store, KEYED))
            assert created
            assert run_blocking(one(store, KEYED)) == (made, False)
        finally:
            store.close()
