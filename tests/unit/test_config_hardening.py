"""Hardening 21: a setting the queue cannot run with stops ``serve`` and ``migrate`` in one
line, instead of breaking requests later (a payload schema that is no JSON Schema or
that reaches for another document, numbers that are not finite or out of any sane range,
a schedule payload JSON cannot carry)."""

from __future__ import annotations

from pathlib import Path

import pytest

from queuelog.config import ConfigError, load_settings


def refused(tmp_path: Path, toml: str, environ: dict[str, str] | None = None) -> str:
    path = tmp_path / "q.toml"
    path.write_text(toml)
    with pytest.raises(ConfigError) as caught:
        load_settings(path, environ=environ or {})
    said = str(caught.value)
    assert "\n" not in said and "Traceback" not in said
    return said


@pytest.mark.parametrize(
    ("schema", "said"),
    [
        ('{ type = "foo" }', "not a valid JSON Schema"),
        ('{ type = "string", pattern = "(" }', "is not a 'regex'"),
        ('{ "$ref" = "http://127.0.0.1:9/x.json" }', "is not inside the schema"),
        ('{ properties = { a = { "$ref" = "other.json#/a" } } }', "is not inside the schema"),
        ('{ properties = { a = { "$ref" = "#/$defs/none" } } }', "points at nothing"),
        ("{ maximum = nan }", "numbers must be finite"),
    ],
)
def test_hardening_21_a_payload_schema_the_server_cannot_use_is_refused(
    tmp_path: Path, schema: str, said: str
) -> None:
    line = refused(tmp_path, f"[types.mail]\npayload_schema = {schema}\n")
    assert line.startswith("types.mail.payload_schema: ") and said in line, line


def test_hardening_21_a_schema_that_refers_inside_itself_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "q.toml"
    path.write_text(
        '[types.mail]\npayload_schema = { "$defs" = { to = { type = "string" } }, '
        'properties = { to = { "$ref" = "#/$defs/to" } } }\n'
    )
    schema = load_settings(path, environ={}).types["mail"].payload_schema
    assert schema is not None and schema["properties"]["to"] == {"$ref": "#/$defs/to"}


@pytest.mark.parametrize(
    ("toml", "environ", "setting"),
    [
        ("[types.t.rate_limit]\njobs = 1\nper_seconds = inf\n", {}, "types.t.rate_limit"),
        ("[types.t.rate_limit]\njobs = 1\nper_seconds = 1e-300\n", {}, "types.t.rate_limit"),
        ("[types.t]\nbackoff_cap_seconds = inf\n", {}, "types.t.backoff_cap_seconds"),
        ("[types.t]\nbackoff_base_seconds = 1e308\n", {}, "types.t.backoff_base_seconds"),
        ("", {"QUEUELOG_SWEEP_INTERVAL_SECONDS": "1e999"}, "QUEUELOG_SWEEP_INTERVAL_SECONDS"),
        ("", {"QUEUELOG_SWEEP_INTERVAL_SECONDS": "nan"}, "QUEUELOG_SWEEP_INTERVAL_SECONDS"),
        ("", {"QUEUELOG_CLAIM_RECHECK_SECONDS": "1e-9"}, "QUEUELOG_CLAIM_RECHECK_SECONDS"),
        ("", {"QUEUELOG_MAX_REQUEST_BYTES": "9" * 23}, "QUEUELOG_MAX_REQUEST_BYTES"),
        ("", {"QUEUELOG_RATE_PER_SECOND": "inf"}, "QUEUELOG_RATE_PER_SECOND"),
        ("", {"QUEUELOG_CONNECTION_WAIT_SECONDS": "inf"}, "QUEUELOG_CONNECTION_WAIT_SECONDS"),
    ],
)
def test_hardening_21_numbers_that_are_not_finite_or_out_of_range_are_refused(
    tmp_path: Path, toml: str, environ: dict[str, str], setting: str
) -> None:
    line = refused(tmp_path, toml, environ)
    assert line.startswith(setting), line


def test_hardening_21_a_schedule_payload_json_cannot_carry_is_refused(tmp_path: Path) -> None:
    toml = '[types.noop]\n[schedules.tick]\nevery_seconds = 60\ntype = "noop"\n'
    toml += "payload = { x = nan }\n"
    line = refused(tmp_path, toml)
    assert line.startswith("schedules.tick.payload: ") and "finite" in line, line
