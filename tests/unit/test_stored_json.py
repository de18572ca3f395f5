"""stored_json: the text both backends store for a payload or a result."""

from __future__ import annotations

import hashlib
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


def _standard_fingerprint(spec: EnqueueSpec, max_retries: int) -> str:
    """The fingerprint as every earlier version made it: the standard encoder's sorted,
    compact ASCII text of the request, integral floats written as ints."""
    body = {
        "type": spec.type,
        "payload": json.loads(json.dumps(spec.payload), parse_float=_integral_as_int),
        "priority": int(spec.priority),
        "max_retries": max_retries,
        "run_at": None,
        "delay_seconds": _integral_as_int(repr(spec.delay_seconds))
        if spec.delay_seconds is not None
        else None,
    }
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _integral_as_int(text: str) -> float | int:
    number = float(text)
    return int(number) if number.is_integer() else number


_PAYLOADS = st.dictionaries(
    st.text() | st.sampled_from(["a", "\x7f", "é", "\u2028", "\x00"]),
    _JSON | st.sampled_from([1e-7, 1e22, 2.0**70, 10**30, -(2**63), 2**64, "\x7f", "\x1f"]),
    max_size=5,
)


@given(_PAYLOADS, st.none() | st.floats(min_value=0, max_value=1e6))
def test_a_fingerprint_is_the_one_earlier_versions_made(payload: Any, delay: float | None) -> None:
    # A request sent again across an upgrade, or to a node of another version, must
    # still match the fingerprint stored with its job.
    spec = EnqueueSpec("noop", payload=payload, delay_seconds=delay, idempotency_key="k")
    assert spec.fingerprint(3) == _standard_fingerprint(spec, 3)


@pytest.mark.parametrize(
    "payload",
    [
        {"a": "b"},
        {"z": 1, "a": [True, None, 2.0]},
        {"del": "\x7f"},
        {"é": 1},
        {"n": 2**64},
        {"t": (1e-05, 2.0)},  # a tuple, written as a list: its fraction counts too
    ],
)
def test_the_fingerprint_of_each_kind_of_payload_is_the_standard_one(payload: Any) -> None:
    spec = EnqueueSpec("noop", payload=payload, delay_seconds=1.5, idempotency_key="k")
    assert spec.fingerprint(3) == _standard_fingerprint(spec, 3)
    without_delay = EnqueueSpec("noop", payload=payload, idempotency_key="k")
    assert without_delay.fingerprint(3) == _standard_fingerprint(without_delay, 3)
