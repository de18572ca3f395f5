"""What a payload schema refused is said in JSON's words, never in Python's reprs."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from queuelog.schema_messages import schema_message

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
