"""Redaction of worker error text before it is stored (V-10).

The text is cut to the stored limit before any rule runs, and every rule reads it
in one pass: a pattern starts only where its token starts (a lookbehind on the
token's own characters) and its repeats are possessive, so no rule reads the same
characters again and again, whatever a worker sends.
"""

from __future__ import annotations

import re
import unicodedata

from queuelog.plain_json import HIDDEN_CHARACTERS

MAX_ERROR_CHARS = 2000
REDACTED = "[redacted]"
PATH = "[path]"
CUT = "[cut]"

# Parts of a key's name that say its value is a secret (separators ignored):
# DB_PASSWORD, client_secret, refresh_token, aws_secret_access_key, privateKey, X-Api-Key...
_SECRET_PARTS = (
    "password",
    "passwd",
    "passphrase",
    "pwd",
    "secret",
    "token",
    "apikey",
    "accesskey",
    "privatekey",
    "credential",
    "authorization",
    "cookie",
)
# A header whose whole value is one credential, spaces and all (``Digest username=...,
# response=...``, ``Token abc def``, a cookie list): redacted to the end of the line.
_WHOLE_LINE_KEYS = ("authorization", "cookie")

_PRIVATE_KEY_BLOCK = re.compile(
    r"-----BEGIN (?:[A-Z0-9]++ ){0,3}PRIVATE KEY(?: BLOCK)?-----(?:.*?-----END [^\n]*+|.*+)",
    re.S,
)
# scheme://user: -- the password runs to the last @ before the line's end or the next URL.
_URL_USER = re.compile(r"(?<![A-Za-z0-9+.-])([A-Za-z][A-Za-z0-9+.-]*+://)[^\s/:@]*+:")
_BEARER = re.compile(r"(?i)(?<![\w-])(bearer|basic)[ \t]++[a-z0-9._~+/=-]{6,}+")
_TOKEN_SHAPES = (
    re.compile(r"\beyJ[\w-]{4,}+\.[\w-]{4,}+\.[\w-]*+"),  # JWT
    re.compile(r"\bql_[A-Za-z0-9]{16,}+\b"),
    re.compile(r"\b(?:sk|pk|rk)_(?:live|test)_[A-Za-z0-9]{8,}+\b"),
    re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}+\b"),
    re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}+"),
)
# key= key: "key": 'key' = key%3D (a query string encoded once more) -- a key is a whole
# token; what follows is its value.
_KEY = re.compile(r"(?<![\w.-])([\w.-]++)[\"']?[ \t]*+(?:[=:]|%3[DdAa])[ \t]*+")
_VALUE = re.compile(r"\"(?:[^\"\\\n]|\\.)*+\"?|'(?:[^'\\\n]|\\.)*+'?|[^\s,;&}\]]++")
_REST_OF_LINE = re.compile(r"[^\n]*+")
_HEX_PAIR = re.compile(r"[0-9A-Fa-f]{2}")
_WORDS = re.compile(r"[A-Z]?[a-z0-9]++|[A-Z0-9]++")
# Absolute paths: file: URLs, UNC (\\server\share), Windows (C:\x or C:/x, spaces
# allowed inside a folder name, its folders split by the separator it began with, so a
# sentence after it that holds the other one is not taken for folders) and POSIX
# (/x/y), but not an HTML end tag (</b>, as an error quoting a web page's answer has).
_PATHS = (
    re.compile(r"(?i)\bfile:/[^\s\"'<>]*+"),
    re.compile(r"\\\\[\w.$-]++\\[^\s\"'<>]++"),
    re.compile(r"\b[A-Za-z]:([\\/])(?:[^\\/\n\r\t\"'<>|:*?]{1,255}+\1)*+[^\\/\s\"'<>|:*?]*+"),
    re.compile(r"(?<![\w.:/-])(?!(?<=<)/[A-Za-z][\w-]*+>)/[\w.@+-]++(?:/[\w.@+-]++)*+"),
)
# C0/C1 controls other than tab and newline, and invisible format characters
# (bidirectional overrides, zero-width characters) that can disguise text.
_CONTROL = re.compile(f"[\x00-\x08\x0b-\x1f{HIDDEN_CHARACTERS}]")
# A str holds a surrogate only unpaired (JSON's escaped pairs decode to one character):
# no database stores it and no encoder writes it out.
_SURROGATE = re.compile("[\ud800-\udfff]")


def sanitize_error(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    """Return ``text`` with credentials, tokens and absolute paths redacted.

    Compatibility characters become their plain forms (NFKC), control and format
    characters other than newline and tab are removed, lone surrogates become
    U+FFFD, and the result is at most ``limit`` characters.
    The text is cut to ``limit`` before any rule runs, so the work done is bounded
    whatever a caller sends; a word the cut went through becomes ``[cut]``, since
    what is left of a secret may no longer look like one.
    """
    cut = len(text) > limit and not text[limit].isspace()
    # Compatibility forms (full-width letters, no-break spaces) become what they show,
    # so that a full-width PASSWORD=x is seen as the key it looks like.
    cleaned = unicodedata.normalize("NFKC", text[:limit])
    cleaned = _SURROGATE.sub("\ufffd", _CONTROL.sub("", cleaned))
    if cut:
        cleaned = _marked_cut(cleaned, limit)
    cleaned = _PRIVATE_KEY_BLOCK.sub(REDACTED, cleaned)
    cleaned = _redact_url_passwords(cleaned, open_end=cut)
    cleaned = _BEARER.sub(rf"\1 {REDACTED}", cleaned)
    for pattern in _TOKEN_SHAPES:
        cleaned = pattern.sub(REDACTED, cleaned)
    cleaned = _redact_secret_values(cleaned)
    for pattern in _PATHS:
        cleaned = pattern.sub(PATH, cleaned)
    # A redaction can be longer than what it replaced.
    return cleaned if len(cleaned) <= limit else _marked_cut(cleaned, limit)


def _redact_url_passwords(text: str, open_end: bool = False) -> str:
    """``scheme://user:password@host`` becomes ``scheme://[redacted]@host``.

    The password may hold ``/``, spaces or ``@``: it runs to the last ``@`` before
    the end of the line or the next URL. With ``open_end`` (the text was cut) a
    password that reaches the end of the text with no ``@`` is redacted to the end.
    """
    found = list(_URL_USER.finditer(text))
    parts, done = [], 0
    for index, match in enumerate(found):
        after = match.end()
        end = found[index + 1].start() if index + 1 < len(found) else len(text)
        newline = text.find("\n", after, end)
        end = end if newline < 0 else newline
        at = text.rfind("@", after, end)
        if at >= 0:
            parts += [text[done : match.start()], match[1], REDACTED]
            done = at
        elif open_end and end == len(text):
            parts += [text[done : match.start()], match[1], REDACTED]
            done = end
    parts.append(text[done:])
    return "".join(parts)


def _redact_secret_values(text: str) -> str:
    """The value of every key that names a secret (see ``_SECRET_PARTS``)."""
    parts, done = [], 0
    for match in _KEY.finditer(text):
        if match.start() < done or not _names_secret(_unescaped_key(text, match)):
            continue
        whole_line = match[1].lower().endswith(_WHOLE_LINE_KEYS)
        value = (_REST_OF_LINE if whole_line else _VALUE).match(text, match.end())
        if value is None or value.end() == match.end():
            continue
        if text.startswith(REDACTED, match.end()):  # a token shape's redaction already
            continue
        parts += [text[done : match.end()], REDACTED]
        done = value.end()
    parts.append(text[done:])
    return "".join(parts)


def _unescaped_key(text: str, key: re.Match[str]) -> str:
    """The key without the hex digits of a ``%XX`` before it (``%26auth``, ``%3Fpass``
    in a query string encoded once more), which the key's token took in."""
    if key.start() > 0 and text[key.start() - 1] == "%" and _HEX_PAIR.match(key[1]):
        return key[1][2:]
    return key[1]


def _names_secret(key: str) -> bool:
    squeezed = "".join(ch for ch in key.lower() if ch.isalnum())
    if any(part in squeezed for part in _SECRET_PARTS):
        return True
    # "pass" and "auth" name a secret only as words of their own (DB_PASS, dbPass, pass,
    # auth, proxy_auth), so that bypass=, passed= or author= keep their values.
    return any(word.lower() in ("pass", "auth") for word in _WORDS.findall(key))


def _marked_cut(text: str, limit: int) -> str:
    """``text`` cut to end in `` [cut]`` within ``limit``: the word at the place that
    leaves room for the mark goes too."""
    room = max(limit - len(CUT) - 1, 0)
    kept = text[:room]
    if room < len(text) and not text[room].isspace():
        kept = _without_last_word(kept)
    kept = kept.rstrip()
    return f"{kept} {CUT}" if kept else CUT


def _without_last_word(text: str) -> str:
    end = len(text)
    while end and not text[end - 1].isspace():
        end -= 1
    return text[:end]
