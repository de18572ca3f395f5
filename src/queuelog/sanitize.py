"""Redaction of worker error text before it is stored (V-10)."""

from __future__ import annotations

import re

MAX_ERROR_CHARS = 2000
REDACTED = "[redacted]"

_RULES: tuple[tuple[re.Pattern[str], str], ...] = (
    # scheme://user:password@host -> scheme://[redacted]@host
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s:@]*:[^/\s@]+@"), rf"\1{REDACTED}@"),
    (re.compile(r"(?i)\bbearer\s+[a-z0-9._~+/=-]+"), f"Bearer {REDACTED}"),
    (re.compile(r"\bql_[A-Za-z0-9]{16,}\b"), REDACTED),
    (re.compile(r"\b(?:sk|pk|rk)_(?:live|test)_[A-Za-z0-9]{8,}\b"), REDACTED),
    (re.compile(r"\bAKIA[0-9A-Z]{16}\b"), REDACTED),
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}\b"), REDACTED),
    (
        re.compile(
            r"(?i)\b(password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key)"
            r"(\s*[=:]\s*)(\"[^\"]*\"|'[^']*'|[^\s,;&]+)"
        ),
        rf"\1\2{REDACTED}",
    ),
    # Absolute paths: POSIX (/x/y) and Windows (C:\x\y).
    (re.compile(r"(?<![\w.:/-])/(?:[\w.@+-]+/)*[\w.@+-]+"), "[path]"),
    (re.compile(r"\b[A-Za-z]:\\(?:[^\\\s]+\\)*[^\\\s]*"), "[path]"),
)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def sanitize_error(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    """Return ``text`` with credentials, tokens and absolute paths redacted.

    Control characters other than newline and tab are removed and the result
    is cut to ``limit`` characters.
    """
    cleaned = _CONTROL.sub("", text)
    for pattern, replacement in _RULES:
        cleaned = pattern.sub(replacement, cleaned)
    return cleaned[:limit]
