"""Redaction of worker error text before it is stored (V-10)."""

from __future__ import annotations

import re

MAX_ERROR_CHARS = 2000
REDACTED = "[redacted]"
PATH = "[path]"

# Words that name a secret; a key containing one (DB_PASSWORD, client_secret,
# refresh_token, aws_secret_access_key...) has its value redacted.
_SECRET_WORDS = "|".join(
    (
        "password",
        "passwd",
        "pwd",
        "secret",
        "token",
        "api[_-]?key",
        "access[_-]?key",
        "credential",
        "authorization",
    )
)

_RULES: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(
            r"-----BEGIN [A-Z ]*PRIVATE KEY-----(?:.*?-----END [A-Z ]*PRIVATE KEY-----|.*)", re.S
        ),
        REDACTED,
    ),
    # scheme://user:password@host -> scheme://[redacted]@host (up to the last @).
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]{0,30}://)[^/\s:@]*:[^/\s]*@"), rf"\1{REDACTED}@"),
    (re.compile(r"(?i)\b(bearer|basic)\s+[a-z0-9._~+/=-]{6,}"), rf"\1 {REDACTED}"),
    (re.compile(r"\beyJ[\w-]{4,}\.[\w-]{4,}\.[\w-]*"), REDACTED),  # JWT
    (re.compile(r"\bql_[A-Za-z0-9]{16,}\b"), REDACTED),
    (re.compile(r"\b(?:sk|pk|rk)_(?:live|test)_[A-Za-z0-9]{8,}\b"), REDACTED),
    (re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), REDACTED),
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}\b"), REDACTED),
    (re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}"), REDACTED),
    (
        re.compile(
            rf"(?i)([a-z0-9_.-]{{0,40}}(?:{_SECRET_WORDS})[a-z0-9_.-]{{0,40}})"
            r"([\"']?\s*[=:]\s*)(\"[^\"]*\"|'[^']*'|[^\s,;&}\]]+)"
        ),
        rf"\1\2{REDACTED}",
    ),
    # Absolute paths: file: URLs, UNC (\\server\share), Windows (C:\x or C:/x, spaces
    # allowed inside a folder name) and POSIX (/x/y).
    (re.compile(r"(?i)\bfile:/+[^\s\"'<>]+"), PATH),
    (re.compile(r"\\\\[\w.$-]+\\[^\s\"'<>]+"), PATH),
    (
        re.compile(r"\b[A-Za-z]:[\\/](?:[^\\/\n\r\t\"'<>|:*?]{1,255}[\\/])*[^\\/\s\"'<>|:*?]*"),
        PATH,
    ),
    (re.compile(r"(?<![\w.:/-])/(?:[\w.@+-]+/)*[\w.@+-]+"), PATH),
)
# C0/C1 controls other than tab and newline, and invisible format characters
# (bidirectional overrides, zero-width characters) that can disguise text.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]")
# A str holds a surrogate only unpaired (JSON's escaped pairs decode to one character):
# no database stores it and no encoder writes it out.
_SURROGATE = re.compile("[\ud800-\udfff]")


def sanitize_error(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    """Return ``text`` with credentials, tokens and absolute paths redacted.

    Control and format characters other than newline and tab are removed, lone
    surrogates become U+FFFD, and the result is cut to ``limit`` characters.
    The text is cut before any rule runs, so the work done is bounded whatever
    a caller sends.
    """
    cleaned = _SURROGATE.sub("\ufffd", _CONTROL.sub("", text[: limit * 4]))
    for pattern, replacement in _RULES:
        cleaned = pattern.sub(replacement, cleaned)
    return cleaned[:limit]
