"""PostgreSQL only, through the storage protocol: a database that goes away and comes back."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import psycopg
import pytest

from queuelog.errors import StorageUnavailable
from queuelog.storage.postgres.store import PostgresStorage
from queuelog.storage.protocol import JobListParams
from tests.conftest import run_blocking
from tests.postgres import fresh_schema
from tests.storage.test_conformance import T0, new_job
from tests.tcpproxy import TcpProxy

WAIT_SECONDS = 0.5


@contextmanager
def proxied_store(**options: Any) -> Iterator[tuple[PostgresStorage, TcpProxy]]:
    """A store that reaches its database through a forwarder the test can cut."""
    with fresh_schema() as url:
        proxy = TcpProxy.to_database(url)
        store = PostgresStorage(proxy.database_url(url), connection_wait=WAIT_SECONDS, **options)
        try:
            yield store, proxy
        finally:
            store.close()
            proxy.close()


@pytest.fixture
def away() -> Iterator[tuple[PostgresStorage, TcpProxy]]:
    with proxied_store(pool_size=2) as proxied:
        yield proxied


def test_an_unreachable_database_is_refused_within_the_wait_and_found_again(
    away: tuple[PostgresStorage, TcpProxy],
) -> None:
    store, proxy = away
    ((job, _),) = run_blocking(store.job_insert_many([new_job()], T0))
    assert store.health.writable and run_blocking(store.ping())
    proxy.cut()
    started = time.monotonic()
    with pytest.raises(StorageUnavailable) as refused:
        run_blocking(store.job_insert_many([new_job()], T0))
    # Refused after the connection wait, not the pool's own (far longer) default.
    assert time.monotonic() - started < WAIT_SECONDS + 10
    assert refused.value.status == 503 and refused.value.reason == "unreachable"
    with pytest.raises(StorageUnavailable):
        run_blocking(store.job_get(job.id))
    assert not store.health.writable and not run_blocking(store.ping())
    assert store.health.refused()["unreachable"] >= 3
    proxy.restore()
    # Readiness' probe finds the database again, without any request's write.
    for _ in range(200):  # bounded: the pool reconnects with a backoff of its own
        if run_blocking(store.ping()):
            break
        time.sleep(0.1)
    assert store.health.writable
    assert run_blocking(store.job_get(job.id)) is not None
    assert len(run_blocking(store.job_insert_many([new_job()], T0))) == 1


def test_connections_the_server_dropped_are_replaced_at_once(
    away: tuple[PostgresStorage, TcpProxy],
) -> None:
    # After a restart or a pg_terminate_backend, the pool's own check waited a second
    # before it looked at the next idle connection: within the store's half-second wait,
    # every first request after one was refused, the database being there all along.
    store, proxy = away
    run_blocking(store.job_insert_many([new_job()], T0))
    for _ in range(3):
        proxy.cut()  # the server drops every connection, and is there again at once
        proxy.restore()
        assert len(run_blocking(store.job_insert_many([new_job()], T0))) == 1
        assert run_blocking(store.job_list(JobListParams(limit=10))).jobs[0]
    assert store.health.writable and store.health.refused() == {}


def with_options(url: str, options: str) -> str:
    """``url`` whose sessions also take libpq ``options`` (beside the schema's)."""
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    query["options"] = f"{query.get('options', '')} {options}".strip()
    return urlunsplit(parts._replace(query=urlencode(query, quote_via=quote)))


@pytest.mark.parametrize(
    ("options", "lock_wait", "reason"),
    [("", 0.3, "locked"), ("-cstatement_timeout=300", 30.0, "canceled")],
)
def test_a_table_another_program_locks_is_waited_for_then_refused(
    options: str, lock_wait: float, reason: str
) -> None:
    # A LOCK TABLE (a long migration, an operator's maintenance) held every request that
    # touched the jobs for as long as it lasted, however long, and /readyz stayed green.
    with fresh_schema() as url:
        store = PostgresStorage(with_options(url, options), pool_size=2, lock_wait=lock_wait)
        try:
            run_blocking(store.job_insert_many([new_job()], T0))
            with psycopg.connect(url) as holder:
                holder.execute("LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE")
                with pytest.raises(StorageUnavailable) as refused:
                    run_blocking(store.job_insert_many([new_job()], T0))
                assert (refused.value.status, refused.value.reason) == (503, reason)
                assert not store.health.writable
            # The lock is gone with its transaction: writes are stored again.
            assert len(run_blocking(store.job_insert_many([new_job()], T0))) == 1
            assert store.health.writable
        finally:
            store.close()


def test_a_read_behind_a_lock_waits_for_it_once() -> None:
    # A read is tried again on a fresh connection when its connection broke; one that
    # waited out the lock wait was tried again too, and waited twice as long.
    lock_wait = 2.0
    with fresh_schema() as url:
        store = PostgresStorage(url, pool_size=2, lock_wait=lock_wait)
        try:
            with psycopg.connect(url) as holder:
                holder.execute("LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE")
                started = time.monotonic()
                with pytest.raises(StorageUnavailable) as refused:
                    run_blocking(store.job_list(JobListParams(limit=10)))
                waited = time.monotonic() - started
            assert refused.value.reason == "locked"
            assert waited < 2 * lock_wait, waited  # once: twice would be at least 4 s
        finally:
            store.close()


def test_a_node_starting_while_another_migrates_waits_past_the_lock_wait() -> None:
    with fresh_schema() as url:
        PostgresStorage(url, pool_size=1).close()  # migrated: the node's tables exist
        schema = dict(parse_qsl(urlsplit(url).query))["options"].partition("=")[2]
        migrating = threading.Event()

        def another_node_migrates() -> None:
            with psycopg.connect(url) as other:
                other.execute(
                    "SELECT pg_advisory_xact_lock(hashtext('queuelog.migrate'), hashtext(%s))",
                    (schema,),
                )
                migrating.set()
                time.sleep(1.0)  # longer than the lock wait below

        thread = threading.Thread(target=another_node_migrates)
        thread.start()
        assert migrating.wait(30)
        store = PostgresStorage(url, pool_size=1, lock_wait=0.2)  # waits for it, not refused
        thread.join()
        try:
            assert len(run_blocking(store.job_insert_many([new_job()], T0))) == 1
        finally:
            store.close()


def test_a_write_that_stores_nothing_does_not_end_a_fault(
    away: tuple[PostgresStorage, TcpProxy],
) -> None:
    store, proxy = away
    proxy.cut()
    with pytest.raises(StorageUnavailable):
        run_blocking(store.job_insert_many([new_job()], T0))
    proxy.restore()
    for _ in range(200):  # bounded: until the pool has reconnected
        try:
            run_blocking(store.job_prune({}, limit=1))  # commits, and writes nothing
            break
        except StorageUnavailable:
            time.sleep(0.1)
    assert not store.health.writable
    run_blocking(store.job_insert_many([new_job()], T0))
    assert store.health.writable


def _losing(url: str, times: int) -> None:
    """Make the next ``times`` inserts of jobs lose a deadlock, as PostgreSQL breaks one."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            f"""
            CREATE SEQUENCE losses;
            CREATE FUNCTION lose() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF nextval('losses') <= {times} THEN
                    RAISE EXCEPTION 'deadlock detected' USING ERRCODE = 'deadlock_detected';
                END IF;
                RETURN NULL;
            END $$;
            CREATE TRIGGER lose BEFORE INSERT ON jobs FOR EACH STATEMENT EXECUTE FUNCTION lose();
            """
        )


@pytest.mark.parametrize("batch", [1, 3])
def test_a_write_that_loses_a_deadlock_is_run_again(batch: int) -> None:
    with fresh_schema() as url:
        store = PostgresStorage(url, pool_size=2)
        try:
            _losing(url, 2)
            made = run_blocking(store.job_insert_many([new_job() for _ in range(batch)], T0))
            assert [created for _, created in made] == [True] * batch
            assert len(run_blocking(store.job_list(JobListParams(limit=10))).jobs) == batch
        finally:
            store.close()


def test_a_write_that_loses_every_try_is_refused_for_contention_not_as_a_fault(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """503 `unavailable` (sent again, it may pass), not a 500; the database is not taken
    for faulty (readiness stays green) and nothing is stored."""
    with fresh_schema() as url:
        store = PostgresStorage(url, pool_size=2)
        try:
            _losing(url, 1_000)
            with pytest.raises(StorageUnavailable) as refused:
                run_blocking(store.job_insert_many([new_job(), new_job()], T0))
            assert refused.value.status == 503 and refused.value.reason == "contention"
            assert "deadlock" not in str(refused.value)  # no database text for the client
            assert store.health.writable and run_blocking(store.ping())
            assert store.health.refused() == {"contention": 1}
            assert run_blocking(store.job_list(JobListParams(limit=10))).jobs == []
            assert "lost to other transactions" in caplog.text
        finally:
            store.close()


def test_hardening_60_after_a_long_outage_the_store_is_found_again_soon(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The pool's tries to reconnect pause longer each time (1, 2, 4, 8, 16 s): after 16 s
    away its next try came 15 s after the database was back. A chain of tries is now
    given up after the store's connect timeout and started again by the next request;
    each try's line is not logged again while its reason is the same."""
    with proxied_store(connect_timeout=2) as (store, proxy):
        run_blocking(store.job_insert_many([new_job()], T0))
        proxy.cut()
        away_until = time.monotonic() + 16
        while time.monotonic() < away_until:  # requests keep coming, as sweeps do
            assert not run_blocking(store.ping())
            time.sleep(0.25)
        proxy.restore()
        back_at = time.monotonic()
        while not run_blocking(store.ping()) and time.monotonic() < back_at + 30:
            time.sleep(0.1)
        assert time.monotonic() - back_at < 8, "the pool slept through the database's return"
    tries = [r for r in caplog.records if r.getMessage().startswith("error connecting")]
    assert len(tries) <= 2, [r.getMessage() for r in tries]


def test_hardening_75_a_wait_for_a_connection_while_all_are_in_use_is_no_fault() -> None:
    """Requests that keep every pooled connection busy (a burst of large listings) made
    the next request's wait time out: refused 503, rightly, but taken for the database
    being unreachable, so /readyz was 503 until a write stored again, and the log said
    a fault began. All the connections in use is the node's own load."""
    with fresh_schema() as url:
        store = PostgresStorage(url, pool_size=1, connection_wait=WAIT_SECONDS, lock_wait=30)
        try:
            ((job, _),) = run_blocking(store.job_insert_many([new_job()], T0))
            with psycopg.connect(url) as holder:
                holder.execute("LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE")
                # The only connection waits behind the lock with a read.
                busy = threading.Thread(target=lambda: run_blocking(store.job_get(job.id)))
                busy.start()
                try:
                    for _ in range(200):  # bounded: until the read holds the connection
                        if _waiting_for_the_lock(url):
                            break
                        time.sleep(0.02)
                    with pytest.raises(StorageUnavailable) as refused:
                        run_blocking(store.job_get(job.id))
                finally:
                    holder.rollback()
                    busy.join(30)
            assert (refused.value.status, refused.value.reason) == (503, "busy")
            assert "in use" in refused.value.detail
            assert store.health.writable and run_blocking(store.ping())
            assert store.health.refused() == {"busy": 1}
        finally:
            store.close()


def _waiting_for_the_lock(url: str) -> bool:
    with psycopg.connect(url, autocommit=True) as conn:
        query = "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = 'jobs'::regclass"
        row = conn.execute(query).fetchone()
        return bool(row and row[0])
