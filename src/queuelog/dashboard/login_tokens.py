"""The login form's CSRF token: a signed, expiring nonce that only the browser keeps.

A browser that has not logged in has no session, and the server keeps nothing for
it. Its token is a random nonce and an expiry, signed with an HMAC under a secret
made when the dashboard is built (so tokens die with the process, as sessions do).
The form carries the token in a hidden field and the browser in a cookie scoped to
the form; a login is accepted only when both carry the same valid, unexpired token.
Any number of visits to the form therefore costs no memory and evicts nothing. A
browser's later visits get the token its cookie holds while that has half its lifetime
left, so forms open in several of its tabs are all good.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from datetime import datetime, timedelta


class LoginTokens:
    """Issues and checks login-form tokens; ``lifetime_seconds`` is how long a form stays good."""

    def __init__(self, lifetime_seconds: int = 3600) -> None:
        self.lifetime = timedelta(seconds=lifetime_seconds)
        self._secret = secrets.token_bytes(32)

    def issue(self, now: datetime) -> str:
        signed = f"{secrets.token_urlsafe(18)}.{int((now + self.lifetime).timestamp())}"
        return f"{signed}.{self._mac(signed)}"

    def for_form(self, cookie: str | None, now: datetime) -> str:
        """The token for a login form the browser asks for: the one its cookie holds while
        it has at least half its lifetime left (so that forms open in several tabs all
        stay good: each new token replaced the cookie, and only the last tab could log
        in), else a new one."""
        if cookie and self._good_until(cookie, now + self.lifetime / 2):
            return cookie
        return self.issue(now)

    def valid(self, cookie: str | None, field: str | None, now: datetime) -> bool:
        """Whether the cookie and the form field carry the same token, signed here and
        not expired; every comparison takes constant time."""
        if not cookie or not field or not hmac.compare_digest(cookie.encode(), field.encode()):
            return False
        return self._good_until(cookie, now)

    def _good_until(self, token: str, when: datetime) -> bool:
        """Whether ``token`` was signed here and has not expired by ``when``."""
        signed, _, mac = token.rpartition(".")
        if not hmac.compare_digest(mac.encode(), self._mac(signed).encode()):
            return False
        expires = signed.rpartition(".")[2]
        return expires.isascii() and expires.isdigit() and when.timestamp() < int(expires)

    def _mac(self, signed: str) -> str:
        digest = hmac.new(self._secret, signed.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")
