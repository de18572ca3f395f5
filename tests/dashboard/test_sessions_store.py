"""The in-memory session store on its own."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from queuelog.dashboard.sessions import SessionStore

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_a_login_gets_a_new_id_and_the_anonymous_one_ends() -> None:
    store = SessionStore(lifetime_seconds=60)
    anonymous = store.start_anonymous(T0)
    admin = store.log_in(anonymous.id, key_id=1, key_hash="h", now=T0)
    assert admin.id != anonymous.id and admin.csrf_token != anonymous.csrf_token
    assert store.get(anonymous.id, T0) is None
    assert store.get(admin.id, T0) == admin


def test_sessions_expire_at_their_deadline() -> None:
    store = SessionStore(lifetime_seconds=60)
    admin = store.log_in("none", key_id=1, key_hash="h", now=T0)
    assert store.get(admin.id, T0 + timedelta(seconds=59)) is not None
    assert store.get(admin.id, T0 + timedelta(seconds=60)) is None


def test_a_flood_of_login_pages_does_not_push_admins_out() -> None:
    store = SessionStore(lifetime_seconds=60, capacity=10)
    admin = store.log_in("none", key_id=1, key_hash="h", now=T0)
    first = store.start_anonymous(T0)
    for _ in range(50):
        store.start_anonymous(T0)
    assert store.get(admin.id, T0) is not None
    assert store.get(first.id, T0) is None  # the oldest anonymous ones go first


def test_csrf_check_is_exact() -> None:
    session = SessionStore(lifetime_seconds=60).start_anonymous(T0)
    assert session.csrf_ok(session.csrf_token)
    assert not session.csrf_ok(None)
    assert not session.csrf_ok("")
    assert not session.csrf_ok(session.csrf_token[:-1])
    assert not session.csrf_ok(session.csrf_token + "x")
