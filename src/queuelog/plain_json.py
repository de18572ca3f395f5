"""What JSON a job's payload, result or progress may be: values that come back out as
they went in. The server's request models and the CLI, which reads JSON its user gives,
refuse the same values by this one check."""

from __future__ import annotations

import json
import math
from typing import Any

# Characters a reader does not see but that change what text shows: C1 controls, and
# format characters (bidirectional overrides, zero-width characters, soft hyphens,
# interlinear annotations, and the tag characters, which browsers draw with no width at
# all, so that "invoice.pdf" may carry a whole hidden sentence). As a character class's
# inside; the CLI and the error sanitiser drop them, the dashboard shows them escaped.
HIDDEN_CHARACTERS = (
    "\x7f-\x9f\xad\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff"
    "\ufff9-\ufffb\U000e0000-\U000e007f"
)


def json_escape(char: str) -> str:
    """``char`` as JSON escapes it: one ``\\u`` escape of four hex digits, or a surrogate
    pair of them beyond the BMP (a tag character), so that escaped JSON is still JSON
    that reads back the same. The CLI and the dashboard write hidden characters so."""
    code = ord(char)
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


# Deeper JSON than any job needs; a limit keeps every later step (the fingerprint, the
# encoders, the dashboard) far from the interpreter's recursion limit.
MAX_JSON_DEPTH = 64


# What JSON text reads as in Python.
_JSON_TYPES = (dict, list, str, int, float, bool, type(None))


def strict_json(text: str) -> Any:
    """``text`` as JSON, refusing (ValueError) what the server refuses and Python's reader
    allows: NaN, Infinity, numbers beyond a float, lone surrogates, deep nesting, an
    object naming a member twice."""
    try:
        value = unique_json(text)
    except RecursionError:  # thousands of levels: the reader's own stack ran out
        raise ValueError(f"must not nest deeper than {MAX_JSON_DEPTH} levels") from None
    check_plain(value)
    return value


class RepeatedName(ValueError):
    """A JSON object that names one member twice (``name``)."""

    def __init__(self, name: str) -> None:
        super().__init__(f"an object names {json.dumps(name)} more than once")
        self.name = name


def _members(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    members = dict(pairs)
    if len(members) < len(pairs):
        seen: set[str] = set()
        for name, _ in pairs:
            if name in seen:
                raise RepeatedName(name)
            seen.add(name)
    return members


def unique_json(raw: str | bytes) -> Any:
    """``raw`` read as JSON, refusing (RepeatedName) an object that names a member twice:
    RFC 8259 leaves what such an object means to each reader (Python's keeps the last
    value, others the first), so a proxy, a log or a schema check in front of the server
    could read another request than the one it stores."""
    return json.loads(raw, object_pairs_hook=_members)


def check_plain(value: Any) -> None:
    """Refuse (ValueError) what JSON cannot carry back out (NaN/Infinity, lone
    surrogates, values of other types than JSON's) and nesting deeper than
    ``MAX_JSON_DEPTH`` objects and arrays."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            raise ValueError("numbers must be finite (no NaN or Infinity)")
        if not isinstance(item, _JSON_TYPES):  # TOML's dates and times, say
            raise ValueError(
                f"values must be JSON's (a {type(item).__name__} is not one: write it as a string)"
            )
        if isinstance(item, str):
            _utf8(item)
        elif isinstance(item, dict | list):
            if depth > MAX_JSON_DEPTH:
                raise ValueError(f"must not nest deeper than {MAX_JSON_DEPTH} levels")
            if isinstance(item, dict):
                for key in item:
                    _utf8(key)
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)


def _utf8(text: str) -> None:
    try:
        text.encode()
    except UnicodeEncodeError:
        raise ValueError("strings must be valid Unicode (no lone surrogates)") from None
