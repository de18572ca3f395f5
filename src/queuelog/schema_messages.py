"""What a type's payload schema refused, said in JSON's words; and what a request's
own fields broke (pydantic's errors), said for the caller.

jsonschema's messages show values as Python writes them (``{'k': True, 'n': None}``,
``['a', 'b']``); an answer shows them as JSON, as the caller sent them. The keywords a
payload schema uses most are said here; any other message has the value it begins with
rewritten. A value is cut to ``SHOWN_CHARACTERS``, so a refused payload is not echoed
whole.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import jsonschema
import referencing
import referencing.exceptions
import referencing.jsonschema

from queuelog.payload_patterns import LinearPatternValidator, matches, unmatchable_pattern
from queuelog.plain_json import check_plain

SHOWN_CHARACTERS = 200


def schema_message(problem: jsonschema.ValidationError) -> str:
    said = _SAID.get(str(problem.validator))
    message = said(problem) if said is not None else None
    return message if message is not None else _leading_value_as_json(problem)


def shown(value: Any) -> str:
    """``value`` as JSON, cut to ``SHOWN_CHARACTERS``."""
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= SHOWN_CHARACTERS else text[:SHOWN_CHARACTERS] + "..."


def _required(problem: jsonschema.ValidationError) -> str | None:
    # One message for each missing name: the one whose repr the message begins with.
    names = problem.validator_value
    for name in names if isinstance(names, list) else ():
        if problem.message == f"{name!r} is a required property":
            return f"{shown(name)} is a required property"
    return None


def _additional(problem: jsonschema.ValidationError) -> str | None:
    value, schema = problem.instance, problem.schema
    if problem.validator_value is not False or not isinstance(value, dict):
        return None
    if not isinstance(schema, dict):
        return None
    known = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    extra = [k for k in value if k not in known and not any(matches(p, k) for p in patterns)]
    return f"additional properties are not allowed: {shown(extra)}"


_SAID: dict[str, Callable[[jsonschema.ValidationError], str | None]] = {
    "type": lambda p: f"{shown(p.instance)} is not of type {shown(p.validator_value)}",
    "enum": lambda p: f"{shown(p.instance)} is not one of {shown(p.validator_value)}",
    "const": lambda p: f"{shown(p.instance)} is not {shown(p.validator_value)}",
    "required": _required,
    "additionalProperties": _additional,
}


def _leading_value_as_json(problem: jsonschema.ValidationError) -> str:
    python = repr(problem.instance)
    if not problem.message.startswith(python):
        return problem.message
    return shown(problem.instance) + problem.message[len(python) :]


def field_message(error: Mapping[str, Any], patterns: Mapping[str, str]) -> str:
    """pydantic's message for a refused field, said for a caller: a pattern in the words
    ``patterns`` gives it (not the regular expression), a check's own words without
    pydantic's "Value error, " before them."""
    if error.get("type") == "string_pattern_mismatch":
        says = patterns.get(str(error.get("ctx", {}).get("pattern")))
        if says is not None:
            return f"String should be {says}"
    return str(error.get("msg", "")).removeprefix("Value error, ")


def payload_validator(schema: dict[str, Any]) -> jsonschema.protocols.Validator:
    """The validator of a type's payload schema. Its registry is empty, so a ``$ref``
    resolves only inside the schema: the server never fetches a schema from elsewhere.
    Its patterns are matched by RE2, in linear time (``payload_patterns``)."""
    validator: jsonschema.protocols.Validator = LinearPatternValidator(
        schema, registry=referencing.Registry()
    )
    return validator


def payload_schema_problem(schema: dict[str, Any]) -> str | None:
    """Why ``schema`` cannot be a type's payload schema (not a valid JSON Schema, a
    value JSON cannot carry, a pattern RE2 cannot match, or a reference to another
    document); None when it can."""
    try:
        check_plain(schema)
        jsonschema.Draft202012Validator.check_schema(schema)
    except ValueError as exc:
        return str(exc)
    except jsonschema.SchemaError as exc:
        return f"not a valid JSON Schema: {exc.message[:200]}"
    if unmatchable := unmatchable_pattern(schema):
        pattern, reason = unmatchable
        return f"pattern {shown(pattern)} cannot be matched in linear time by RE2: {reason}"
    root = referencing.jsonschema.DRAFT202012.create_resource(schema)
    inside = referencing.Registry().resolver_with_root(root)
    for ref in _references(schema):
        if not ref.startswith("#"):
            return f"$ref {shown(ref)} is not inside the schema (only #... references are)"
        try:
            inside.lookup(ref)
        except referencing.exceptions.Unresolvable:
            return f"$ref {shown(ref)} points at nothing in the schema"
    return None


def _references(value: Any) -> list[str]:
    """Every ``$ref`` and ``$dynamicRef`` in ``value``, at any depth."""
    found: list[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            found += [str(item[k]) for k in ("$ref", "$dynamicRef") if k in item]
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found
