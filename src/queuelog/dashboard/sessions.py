"""Server-side dashboard sessions: a random id in a cookie, everything else here.

Only a logged-in admin has a session; the login form needs none (its CSRF token
is in ``login_tokens.py``). Sessions live in this process's memory, so they suit
one node: a restart logs everyone out, and behind a load balancer each node
needs sticky sessions. The cookie carries only the session id; the API key itself
is never kept, only its id and hash, so each request can check that the key is
still active.
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
    """A logged-in admin's session."""

    id: str
    csrf_token: str
    expires_at: datetime
    key_id: int
    key_hash: str

    def csrf_ok(self, presented: str | None) -> bool:
        """Constant-time check of a form's synchroniser token."""
        return presented is not None and hmac.compare_digest(
            self.csrf_token.encode(), presented.encode()
        )


class SessionStore:
    """Bounded, thread-safe, in-memory sessions of logged-in admins, with absolute expiry."""

    def __init__(self, lifetime_seconds: int, capacity: int = 1000) -> None:
        self.lifetime = timedelta(seconds=lifetime_seconds)
        self._capacity = capacity
        self._sessions: OrderedDict[str, Session] = OrderedDict()
        # By session id: what a form did, and the page its answer sent the browser to.
        self._notices: dict[str, tuple[str, str]] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._sessions)

    def log_in(self, key_id: int, key_hash: str, now: datetime) -> Session:
        """A new session, with a new id and token, for a browser that just logged in."""
        session = Session(
            id=secrets.token_urlsafe(32),
            csrf_token=secrets.token_urlsafe(32),
            expires_at=now + self.lifetime,
            key_id=key_id,
            key_hash=key_hash,
        )
        with self._lock:
            if len(self._sessions) >= self._capacity:
                for sid in [sid for sid, s in self._sessions.items() if s.expires_at <= now]:
                    self._drop(sid)
            while len(self._sessions) >= self._capacity:
                self._drop(next(iter(self._sessions)))
            self._sessions[session.id] = session
        return session

    def get(self, session_id: str | None, now: datetime) -> Session | None:
        if not session_id:
            return None
        with self._lock:
            session = self._sessions.get(session_id)
        if session is None:
            return None
        if session.expires_at <= now:
            self.end(session_id)
            return None
        return session

    def end(self, session_id: str) -> None:
        with self._lock:
            self._drop(session_id)

    def _drop(self, session_id: str) -> None:
        """Forget a session and its notice (the lock held)."""
        self._sessions.pop(session_id, None)
        self._notices.pop(session_id, None)

    def leave_notice(self, session_id: str, page: str, text: str) -> None:
        """What a form did, for ``page`` (where its answer sends the browser) to say. It
        lives on the server, so no link can make a page claim what was not done."""
        with self._lock:
            if session_id in self._sessions:
                self._notices[session_id] = (page, text)

    def take_notice(self, session_id: str, page: str) -> str | None:
        """The notice left for the session's ``page``, once (not for another page the
        session shows meanwhile, such as another tab's refresh)."""
        with self._lock:
            left = self._notices.get(session_id)
            if left is None or left[0] != page:
                return None
            del self._notices[session_id]
        return left[1]


class SentForms:
    """The ids of the create-key forms that made a key (the latest ``capacity``). The
    page that shows a new key answers that form's post, so a reload posts it again: the
    second post must not make a second key."""

    def __init__(self, capacity: int = 1000) -> None:
        self._capacity = capacity
        self._sent: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    def first(self, form_id: str) -> bool:
        """Whether this is the first post of the form ``form_id`` (and note it)."""
        with self._lock:
            if form_id in self._sent:
                return False
            self._sent[form_id] = None
            if len(self._sent) > self._capacity:
                self._sent.popitem(last=False)
        return True

    def forget(self, form_id: str) -> None:
        """The post of ``form_id`` made no key: it may be sent again."""
        with self._lock:
            self._sent.pop(form_id, None)
