"""Hardening 73: a payload schema's patterns are matched by RE2, in time linear in the
text. Python's ``re`` backtracks: against the payloads here, each of these patterns
would hold the server's event loop far longer than any test may run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from queuelog.config import Settings
from tests.conftest import TYPES, Api, make_settings

EMAIL = r"^([a-zA-Z0-9_.+-]+)+@example\.com$"
NESTED = r"^(a+)+$"
# Each character more doubles what a backtracking match of these patterns costs.
LONG = "a" * 60

PATTERN_TYPES: dict[str, Any] = {
    **TYPES,
    "mail": {"payload_schema": {"properties": {"to": {"type": "string", "pattern": EMAIL}}}},
    "word": {"payload_schema": {"properties": {"word": {"pattern": NESTED}}}},
    "tagged": {
        "payload_schema": {
            "patternProperties": {NESTED: {"type": "integer"}},
            "additionalProperties": False,
        }
    },
    "counted": {
        "payload_schema": {
            "allOf": [{"patternProperties": {NESTED: {"type": "integer"}}}],
            "unevaluatedProperties": False,
        }
    },
}


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return make_settings(tmp_path, types=PATTERN_TYPES)


def refusals(response: Any) -> list[tuple[list[Any], str]]:
    assert response.status_code == 422, response.text
    problem = response.json()
    assert problem["type"] == "validation"
    return [(error["loc"], error["msg"]) for error in problem["errors"]]


@pytest.mark.parametrize(
    ("job_type", "payload"),
    [("mail", {"to": f"{LONG}@example.org"}), ("word", {"word": f"{LONG}!"})],
)
def test_hardening_73_a_pattern_that_backtracks_in_python_refuses_a_long_text_at_once(
    producer: Api, job_type: str, payload: dict[str, str]
) -> None:
    ((loc, said),) = refusals(producer.post("/jobs", json={"type": job_type, "payload": payload}))
    (name,) = payload
    assert loc == ["body", "payload", name] and "does not match" in said, said


@pytest.mark.parametrize(
    ("job_type", "payload"), [("mail", {"to": f"{LONG}@example.com"}), ("word", {"word": LONG})]
)
def test_hardening_73_a_pattern_that_backtracks_in_python_takes_a_long_text_it_matches(
    producer: Api, job_type: str, payload: dict[str, str]
) -> None:
    response = producer.post("/jobs", json={"type": job_type, "payload": payload})
    assert response.status_code == 201, response.text


@pytest.mark.parametrize(
    ("job_type", "said"),
    [
        ("tagged", f'additional properties are not allowed: ["{LONG}!"]'),
        ("counted", f"Unevaluated properties are not allowed ('{LONG}!' was unexpected)"),
    ],
)
def test_hardening_73_property_names_are_matched_against_patterns_in_linear_time(
    producer: Api, job_type: str, said: str
) -> None:
    refused = producer.post("/jobs", json={"type": job_type, "payload": {f"{LONG}!": 1}})
    assert refusals(refused) == [(["body", "payload"], said)]
    mistyped = producer.post("/jobs", json={"type": job_type, "payload": {LONG: "one"}})
    assert (["body", "payload", LONG], '"one" is not of type "integer"') in refusals(mistyped)
    taken = producer.post("/jobs", json={"type": job_type, "payload": {LONG: 1}})
    assert taken.status_code == 201, taken.text


def test_hardening_73_a_schedule_payload_is_matched_in_linear_time_too(admin: Api) -> None:
    body = {"name": "tick", "every_seconds": 60, "type": "mail"}
    refused = admin.post("/schedules", json={**body, "payload": {"to": f"{LONG}@example.org"}})
    assert refused.status_code == 422, refused.text
    taken = admin.post("/schedules", json={**body, "payload": {"to": f"{LONG}@example.com"}})
    assert taken.status_code == 201, taken.text
