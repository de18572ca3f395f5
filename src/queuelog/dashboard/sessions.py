"""Server-side dashboard sessions: a random id in a cookie, everything else here.

Sessions live in this process's memory, so they suit one node: a restart logs
everyone out, and behind a load balancer each node needs sticky sessions. The
cookie carries only the session id; the API key itself is never kept, only its
id and hash, so each request can check that the key is still active.
"""

from __future__ import annotations

import hmac
import secrets
import threading
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime, timedelta


@dataclass(frozen=True, slots=True)
class Session:
    """A browser's session; ``key_id`` is None until it logs in."""

    id: str
    csrf_token: str
    expires_at: datetime
    key_id: int | None = None
    key_hash: str | None = None

    def csrf_ok(self, presented: str | None) -> bool:
        """Constant-time check of a form's synchroniser token."""
        return presented is not None and hmac.compare_digest(
            self.csrf_token.encode(), presented.encode()
        )


class SessionStore:
    """Bounded, thread-safe, in-memory sessions with absolute expiry.

    Anonymous sessions (the login form's CSRF token) and logged-in ones are kept
    apart, so a flood of login-page visits cannot push an admin out.
    """

    def __init__(
        self, lifetime_seconds: int, anonymous_seconds: int = 3600, capacity: int = 1000
    ) -> None:
        self.lifetime = timedelta(seconds=lifetime_seconds)
        self._anonymous_lifetime = timedelta(seconds=anonymous_seconds)
        self._capacity = capacity
        self._anonymous: OrderedDict[str, Session] = OrderedDict()
        self._admins: OrderedDict[str, Session] = OrderedDict()
        self._lock = threading.Lock()

    def start_anonymous(self, now: datetime) -> Session:
        session = _new(now + self._anonymous_lifetime)
        self._put(self._anonymous, session, now)
        return session

    def log_in(self, anonymous_id: str, key_id: int, key_hash: str, now: datetime) -> Session:
        """A fresh session id for the logged-in browser (never reuse the anonymous one)."""
        self.end(anonymous_id)
        session = _new(now + self.lifetime, key_id, key_hash)
        self._put(self._admins, session, now)
        return session

    def get(self, session_id: str | None, now: datetime) -> Session | None:
        if not session_id:
            return None
        with self._lock:
            session = self._admins.get(session_id) or self._anonymous.get(session_id)
        if session is None:
            return None
        if session.expires_at <= now:
            self.end(session_id)
            return None
        return session

    def end(self, session_id: str) -> None:
        with self._lock:
            self._admins.pop(session_id, None)
            self._anonymous.pop(session_id, None)

    def _put(self, table: OrderedDict[str, Session], session: Session, now: datetime) -> None:
        with self._lock:
            if len(table) >= self._capacity:
                for sid in [sid for sid, s in table.items() if s.expires_at <= now]:
                    del table[sid]
            while len(table) >= self._capacity:
                table.popitem(last=False)
            table[session.id] = session


def _new(expires_at: datetime, key_id: int | None = None, key_hash: str | None = None) -> Session:
    return Session(
        id=secrets.token_urlsafe(32),
        csrf_token=secrets.token_urlsafe(32),
        expires_at=expires_at,
        key_id=key_id,
        key_hash=key_hash,
    )
