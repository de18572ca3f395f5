"""stored_json: the text both backends store for a payload or a result."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from queuelog import specs
from queuelog.service import JobService
from queuelog.specs import EnqueueSpec, FinishSpec, stored_json
from tests.conftest import KeyMaker

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


async def test_a_payload_and_a_result_are_each_encoded_once_on_their_way_to_storage(
    service: JobService, make_key: KeyMaker, monkeypatch: pytest.MonkeyPatch
) -> None:
    producer, _ = make_key("shop", "producer")
    worker, _ = make_key("mailer", "worker")
    encoded: list[Any] = []
    real = specs._STORED

    def counted(value: Any, level: int) -> Any:
        encoded.append(value)
        return real(value, level)

    monkeypatch.setattr(specs, "_STORED", counted)
    payload, results = {"to": "a@b.c"}, [{"sent": 1}, {"sent": 2}]
    await service.enqueue_many(producer, [EnqueueSpec("noop", payload=payload)] * 2)
    assert encoded == [payload, payload]
    encoded.clear()
    held = await service.claim(worker, limit=2)
    await service.finish(
        worker, FinishSpec(held[0].id, held[0].lease_token or "", result=results[0])
    )
    await service.finish_many(
        worker, [FinishSpec(held[1].id, held[1].lease_token or "", result=results[1])]
    )
    assert encoded == results
    assert [(await service.get(producer, job.id)).result for job in held] == results


async def test_a_value_that_refers_to_itself_gets_the_standard_encoder_s_error() -> None:
    looped: dict[str, Any] = {"a": [1]}
    looped["a"].append(looped)
    with pytest.raises(ValueError, match="Circular reference detected"):
        stored_json(looped)
    assert stored_json({"a": [1]}) == '{"a":[1]}'
