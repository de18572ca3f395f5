"""What a payload schema refused is said in JSON's words, never in Python's reprs."""

from __future__ import annotations

import re
from typing import Any

import jsonschema
import pytest

from queuelog.schema_messages import payload_validator, schema_message

SCHEMA = {
    "type": "object",
    "required": ["to", "caf\u00e9'\""],
    "additionalProperties": False,
    "properties": {
        "to": {"type": "string", "minLength": 3},
        "caf\u00e9'\"": {"enum": ["a", True, None]},
        "mode": {"const": {"on": True}},
        "n": {"type": ["integer", "null"]},
    },
}


def messages(payload: Any) -> list[str]:
    validator = jsonschema.Draft202012Validator(SCHEMA)
    return sorted(schema_message(p) for p in validator.iter_errors(payload))


@pytest.mark.parametrize(
    ("payload", "said"),
    [
        ({}, ['"caf\u00e9\'\\"" is a required property', '"to" is a required property']),
        (
            {"to": "abc", "caf\u00e9'\"": "a", "\u00fc'\"": 1},
            ['additional properties are not allowed: ["\u00fc\'\\""]'],
        ),
        ({"to": {"k": True}, "caf\u00e9'\"": "a"}, ['{"k": true} is not of type "string"']),
        ({"to": "abc", "caf\u00e9'\"": False}, ['false is not one of ["a", true, null]']),
        ({"to": "abc", "caf\u00e9'\"": "a", "mode": None}, ['null is not {"on": true}']),
        ({"to": "abc", "caf\u00e9'\"": "a", "n": 1.5}, ['1.5 is not of type ["integer", "null"]']),
        ({"to": "ab", "caf\u00e9'\"": "a"}, ['"ab" is too short']),
    ],
)
def test_hardening_14_schema_refusals_are_said_in_json(payload: Any, said: list[str]) -> None:
    assert messages(payload) == sorted(said)


ORDINARY = [
    (r"^[a-z0-9._%+-]+@[a-z0-9.-]+\.[a-z]{2,}$", ["ann@example.com", "Ann@example.com", "a@b"]),
    (r"^\d{3}-\d{4}$", ["555-1234", "5551234", "555-12345"]),
    (r"^[A-Z]{2}\d+$", ["FR123", "fr123", "FR"]),
    ("(?i)^caf\u00e9$", ["CAF\u00c9", "cafe", "caf\u00e9s"]),
    (r"^[\u0020-\u007e]*$", ["plain", "caf\u00e9", ""]),
    (r"^\\u0041$", ["\\u0041", "A"]),
    (r"^.{2}$", ["\u00e9\u00e9", "\U0001f600x", "abc"]),
    (r"\bend\b", ["the end.", "endless", "an end"]),
    (r"^\S+@\S+$", ["a@b", "a b@c", "@"]),
]


@pytest.mark.parametrize(("pattern", "texts"), ORDINARY)
def test_hardening_73_ordinary_patterns_accept_and_refuse_as_before(
    pattern: str, texts: list[str]
) -> None:
    """RE2 matches the common syntax as Python's ``re`` did, in ``pattern`` and in
    ``patternProperties`` (a property name it does not match is additional)."""
    text_schema = payload_validator({"pattern": pattern})
    name_schema = payload_validator(
        {"patternProperties": {pattern: {}}, "additionalProperties": False}
    )
    for text in texts:
        before = re.search(pattern, text) is not None
        assert text_schema.is_valid(text) is before, text
        assert name_schema.is_valid({text: 1}) is before, text


@pytest.mark.parametrize(
    ("pattern", "text"),
    [(r"^\d+$", "\u0663\u0664"), (r"^\w+$", "caf\u00e9"), (r"^ok$", "ok\n")],
)
def test_hardening_73_patterns_keep_json_schema_s_meaning_where_python_s_differs(
    pattern: str, text: str
) -> None:
    """``\\d`` and ``\\w`` are ASCII and ``$`` is the text's end, as in ECMA-262 (Python's
    ``re`` matched these texts)."""
    assert re.search(pattern, text) is not None
    assert not payload_validator({"pattern": pattern}).is_valid(text)
