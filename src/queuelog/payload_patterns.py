"""A payload schema's regular expressions, matched by RE2 in time linear in the text.

jsonschema matches ``pattern`` and ``patternProperties`` (and, through them, which
properties ``additionalProperties`` and ``unevaluatedProperties`` meet) with Python's
``re``, which backtracks: a pattern as ordinary as ``^([a-z.]+)+@example\\.com$`` and one
payload a few dozen characters long held the server's event loop, every other request
waiting, for longer the longer the text. The payload validator here gives those four
keywords functions of its own, jsonschema's own but for the matching, which RE2 does.

RE2 has no back-references and no look-around, so a schema with one is refused when the
config loads (``unmatchable_pattern``). Its defaults keep a JSON Schema pattern's meaning
(ECMA-262) where Python's ``re`` departs from it: ``\\d``, ``\\w`` and ``\\b`` are ASCII,
``$`` is the end of the text only; pattern and text are UTF-8, so ``.`` is one character;
``\\u`` with four hex digits is the character they name.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Mapping
from typing import Any

import jsonschema
import re2

# Each escape in turn (so ``\\u`` stays an escaped backslash before a ``u``): ECMA-262
# writes a character as ``\u`` and four hex digits (``\u00e9``), which RE2 writes in
# braces after ``\x`` (``\x{00e9}``).
_ESCAPE = re.compile(r"\\(?:u([0-9A-Fa-f]{4})|.)", re.DOTALL)


def _as_re2(escape: re.Match[str]) -> str:
    return f"\\x{{{escape[1]}}}" if escape[1] else escape[0]


@functools.cache
def _compiled(pattern: str) -> Any:
    # Patterns come from the config file only, so the cache holds a known few.
    options = re2.Options()
    options.never_capture = True  # only whether it matches is asked
    options.log_errors = False  # a refused pattern is said once, in the config's error
    return re2.compile(_ESCAPE.sub(_as_re2, pattern), options)


def matches(pattern: str, text: str) -> bool:
    """Whether ``pattern`` matches somewhere in ``text``, as JSON Schema's ``pattern`` asks."""
    return _compiled(pattern).search(text) is not None


def _matches_any(patterns: Mapping[str, Any], text: str) -> bool:
    return any(matches(pattern, text) for pattern in patterns)


def unmatchable_pattern(schema: dict[str, Any]) -> tuple[str, str] | None:
    """The first pattern of ``schema`` (a ``pattern`` or a ``patternProperties`` name,
    wherever the schema has one) that RE2 cannot compile, and RE2's reason; None when
    there is none. ``schema`` is already a valid JSON Schema."""
    checker = jsonschema.FormatChecker(formats=())
    checker.checks("regex", raises=re2.error)(_compiled)
    try:
        # The meta-schema finds every pattern where a schema may have one, and only there.
        jsonschema.Draft202012Validator.check_schema(schema, format_checker=checker)
    except jsonschema.SchemaError as exc:
        return str(exc.instance), _reason(exc.cause)
    return None


def _reason(error: BaseException | None) -> str:
    # RE2's own words ("invalid perl operator: (?="), which its module gives as bytes.
    said = error.args[0] if error is not None and error.args else error
    return said.decode(errors="replace") if isinstance(said, bytes) else str(said)


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[Any]:
    if validator.is_type(instance, "string") and not matches(pattern, instance):
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(
    validator: Any, patterns: dict[str, Any], instance: Any, schema: Any
) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for name, value in instance.items():
            if matches(pattern, name):
                yield from validator.descend(value, subschema, path=name, schema_path=pattern)


def _additional_properties(
    validator: Any, additional: Any, instance: Any, schema: dict[str, Any]
) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    known, patterns = schema.get("properties", {}), schema.get("patternProperties", {})
    extras = {name for name in instance if name not in known and not _matches_any(patterns, name)}
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        names = ", ".join(repr(extra) for extra in sorted(extras))
        if patterns:
            verb = "does" if len(extras) == 1 else "do"
            regexes = ", ".join(repr(pattern) for pattern in sorted(patterns))
            message = f"{names} {verb} not match any of the regexes: {regexes}"
        else:
            verb = "was" if len(extras) == 1 else "were"
            message = f"Additional properties are not allowed ({names} {verb} unexpected)"
        yield jsonschema.ValidationError(message)


def _unevaluated_properties(
    validator: Any, unevaluated: Any, instance: Any, schema: dict[str, Any]
) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    evaluated = _evaluated(validator, instance, schema)
    refused = [
        name
        for name in instance
        if name not in evaluated
        and not _passes(validator.descend(instance[name], unevaluated, path=name, schema_path=name))
    ]
    if not refused:
        return
    names = ", ".join(repr(name) for name in (sorted(refused) if unevaluated is False else refused))
    verb = "was" if len(refused) == 1 else "were"
    if unevaluated is False:
        message = f"Unevaluated properties are not allowed ({names} {verb} unexpected)"
    else:
        message = (
            "Unevaluated properties are not valid under the given schema "
            f"({names} {verb} unevaluated and invalid)"
        )
    yield jsonschema.ValidationError(message)


def _evaluated(validator: Any, instance: dict[str, Any], schema: Any) -> set[str]:
    """The properties of ``instance`` that ``schema`` evaluates: jsonschema's reckoning
    (``find_evaluated_property_keys_by_schema``), its patterns matched by RE2."""
    if not isinstance(schema, dict):
        return set()
    names: set[str] = set()
    for ref in (schema.get("$ref"), schema.get("$dynamicRef")):
        if ref is not None:
            resolved = validator._resolver.lookup(ref)
            inside = validator.evolve(schema=resolved.contents, _resolver=resolved.resolver)
            names |= _evaluated(inside, instance, resolved.contents)
    names |= schema.get("properties", {}).keys() & instance.keys()
    for keyword in ("additionalProperties", "unevaluatedProperties"):
        if (subschema := schema.get(keyword)) is not None:
            names |= {k for k, v in instance.items() if _passes(validator.descend(v, subschema))}
    patterns = schema.get("patternProperties", {})
    names |= {name for name in instance if _matches_any(patterns, name)}
    for name, subschema in schema.get("dependentSchemas", {}).items():
        if name in instance:
            names |= _evaluated(validator, instance, subschema)
    for keyword in ("allOf", "oneOf", "anyOf"):
        for subschema in schema.get(keyword, []):
            if _passes(validator.descend(instance, subschema)):
                names |= _evaluated(validator, instance, subschema)
    if "if" in schema:
        met = validator.evolve(schema=schema["if"]).is_valid(instance)
        for branch in ("if", "then") if met else ("else",):
            names |= _evaluated(validator, instance, schema.get(branch))
    return names


def _passes(problems: Iterator[Any]) -> bool:
    return next(problems, None) is None


# jsonschema's way to change what a keyword does (``validators.extend``); its stubs
# leave the function untyped.
LinearPatternValidator = jsonschema.validators.extend(  # type: ignore[no-untyped-call]
    jsonschema.Draft202012Validator,
    {
        "pattern": _pattern,
        "patternProperties": _pattern_properties,
        "additionalProperties": _additional_properties,
        "unevaluatedProperties": _unevaluated_properties,
    },
)
