"""The in-memory session store and the login form's tokens on their own."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from queuelog.dashboard.login_tokens import LoginTokens
from queuelog.dashboard.sessions import SessionStore

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_each_login_gets_its_own_session_id_and_token() -> None:
    store = SessionStore(lifetime_seconds=60)
    first = store.log_in(key_id=1, key_hash="h", now=T0)
    second = store.log_in(key_id=1, key_hash="h", now=T0)
    assert first.id != second.id and first.csrf_token != second.csrf_token
    assert store.get(first.id, T0) == first and len(store) == 2
    store.end(first.id)
    assert store.get(first.id, T0) is None and len(store) == 1


def test_sessions_expire_at_their_deadline() -> None:
    store = SessionStore(lifetime_seconds=60)
    admin = store.log_in(key_id=1, key_hash="h", now=T0)
    assert store.get(admin.id, T0 + timedelta(seconds=59)) is not None
    assert store.get(admin.id, T0 + timedelta(seconds=60)) is None


def test_a_full_store_drops_the_oldest_session() -> None:
    store = SessionStore(lifetime_seconds=60, capacity=10)
    first = store.log_in(key_id=1, key_hash="h", now=T0)
    for _ in range(10):
        store.log_in(key_id=2, key_hash="h2", now=T0)
    assert store.get(first.id, T0) is None and len(store) == 10


def test_a_notice_is_its_session_s_once_and_goes_with_it() -> None:
    store = SessionStore(lifetime_seconds=60, capacity=2)
    first = store.log_in(key_id=1, key_hash="h", now=T0)
    store.leave_notice(first.id, "/ui/types", "done")
    store.leave_notice("no-such-session", "/ui/types", "forged")
    assert store.take_notice("no-such-session", "/ui/types") is None
    assert store.take_notice(first.id, "/ui") is None  # another page: it waits for its own
    assert store.take_notice(first.id, "/ui/types") == "done"
    assert store.take_notice(first.id, "/ui/types") is None
    store.leave_notice(first.id, "/ui/types", "again")
    store.log_in(key_id=2, key_hash="h2", now=T0)
    store.log_in(key_id=3, key_hash="h3", now=T0)  # the store is full: the first session goes
    assert store.take_notice(first.id, "/ui/types") is None


def test_csrf_check_is_exact() -> None:
    session = SessionStore(lifetime_seconds=60).log_in(key_id=1, key_hash="h", now=T0)
    assert session.csrf_ok(session.csrf_token)
    assert not session.csrf_ok(None)
    assert not session.csrf_ok("")
    assert not session.csrf_ok(session.csrf_token[:-1])
    assert not session.csrf_ok(session.csrf_token + "x")


def test_hardening_04_a_login_token_is_good_in_its_form_and_cookie_until_it_expires() -> None:
    tokens = LoginTokens(lifetime_seconds=3600)
    token = tokens.issue(T0)
    assert tokens.valid(token, token, T0 + timedelta(seconds=3599))
    assert not tokens.valid(token, token, T0 + timedelta(seconds=3600))
    assert tokens.issue(T0) != token


def test_hardening_04_a_login_token_must_match_its_cookie_and_be_signed_here() -> None:
    tokens = LoginTokens()
    token, other = tokens.issue(T0), tokens.issue(T0)
    assert not tokens.valid(token, other, T0)
    assert not tokens.valid(None, token, T0) and not tokens.valid(token, None, T0)
    nonce, expires, mac = token.split(".")
    later = f"{nonce}.{int(expires) + 86_400}.{mac}"
    assert not tokens.valid(later, later, T0)
    forged = f"{nonce}.{expires}.{mac[:-1]}{'A' if mac[-1] != 'A' else 'B'}"
    assert not tokens.valid(forged, forged, T0)
    elsewhere = LoginTokens().issue(T0)  # another process's secret
    assert not tokens.valid(elsewhere, elsewhere, T0)
    assert not tokens.valid("é.1.x", "é.1.x", T0)
