"""stored_json: the text both backends store for a payload or a result."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from queuelog.specs import EnqueueSpec, stored_json

pytestmark = pytest.mark.anyio

_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=30,
)


def _standard(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


@given(_JSON)
async def test_the_stored_text_is_the_standard_encoder_s_compact_text(value: Any) -> None:
    assert stored_json(value) == _standard(value)


async def test_the_stored_text_keeps_every_character_and_escapes_only_what_json_must() -> None:
    value = {"é": 'caf\u00e9 \u2028 \n\x01"\\', "n": 10**30, "f": [1e-7, -0.0, 1e22]}
    assert stored_json(value) == '{"é":"café \u2028 \\n\\u0001\\"\\\\","n":' + str(10**30) + (
        ',"f":[1e-07,-0.0,1e+22]}'
    )


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), {"a": [float("-inf")]}])
async def test_numbers_json_cannot_carry_are_refused(bad: Any) -> None:
    with pytest.raises(ValueError):
        stored_json(bad)


async def test_a_value_json_cannot_hold_is_refused_with_the_standard_error() -> None:
    with pytest.raises(TypeError, match="not JSON serializable"):
        stored_json({"a": object()})
    # A value may be stored again after a refusal: nothing is left over from it.
    assert stored_json({"a": [1]}) == '{"a":[1]}'


def test_a_value_that_refers_to_itself_gets_the_standard_encoder_s_error() -> None:
    looped: dict[str, Any] = {"a": [1]}
    looped["a"].append(looped)
    with pytest.raises(ValueError, match="Circular reference detected"):
        stored_json(looped)
    assert stored_json({"a": [1]}) == '{"a":[1]}'


def test_hardening_02_the_fingerprint_reads_a_deep_payload_without_recursing() -> None:
    # Deeper than the interpreter's stack allows a recursive walk (two frames a level).
    def nested(leaf: Any) -> Any:
        value = leaf
        for _ in range(400):
            value = {"a": [value]}
        return value

    spelled_as_float = EnqueueSpec("noop", payload=nested(1.0), idempotency_key="k")
    spelled_as_int = EnqueueSpec("noop", payload=nested(1), idempotency_key="k")
    assert spelled_as_float.fingerprint(3) == spelled_as_int.fingerprint(3)
    assert spelled_as_float.fingerprint(3) != EnqueueSpec("noop", payload=nested(2)).fingerprint(3)
