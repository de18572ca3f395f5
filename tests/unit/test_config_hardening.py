"""Hardening 21: a setting the queue cannot run with stops ``serve`` and ``migrate`` in one
line, instead of breaking requests later (a payload schema that is no JSON Schema or
that reaches for another document, numbers that are not finite or out of any sane range,
a schedule payload JSON cannot carry)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from queuelog.config import ConfigError, load_settings
from queuelog.models import JobStatus


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
    ("schema", "said"),
    [
        (
            "{ type = 'string', pattern = '^(?=.*[0-9]).{8,}$' }",
            'pattern "^(?=.*[0-9]).{8,}$" cannot be matched in linear time by RE2: '
            "invalid perl operator: (?=",
        ),
        (
            r"{ properties = { pair = { pattern = '^(\w)\1$' } } }",
            r'pattern "^(\\w)\\1$" cannot be matched in linear time by RE2: '
            r"invalid escape sequence: \1",
        ),
        (
            "{ properties = { tags = { patternProperties = { '(?<!x)y' = {} } } } }",
            'pattern "(?<!x)y" cannot be matched in linear time by RE2: '
            "invalid perl operator: (?<!",
        ),
        (
            "{ '$defs' = { code = { items = { pattern = '(?!0)[0-9]+' } } } }",
            'pattern "(?!0)[0-9]+" cannot be matched in linear time by RE2: '
            "invalid perl operator: (?!",
        ),
    ],
)
def test_hardening_73_a_pattern_re2_cannot_match_is_refused_in_one_line(
    tmp_path: Path, schema: str, said: str
) -> None:
    line = refused(tmp_path, f"[types.mail]\npayload_schema = {schema}\n")
    assert line == f"types.mail.payload_schema: {said}", line


def test_hardening_73_only_a_schema_s_own_patterns_are_held_to_re2(tmp_path: Path) -> None:
    """A value that only looks like a pattern (a ``const``'s ``pattern`` field) is no
    pattern of the schema, and RE2 reads the common syntax."""
    path = tmp_path / "q.toml"
    path.write_text(
        "[types.mail]\npayload_schema = { const = { pattern = '(?=x)' }, properties = "
        "{ code = { pattern = '^[A-Z]{2}\\d+$' }, to = { pattern = '^\\S+@\\S+$' } } }\n"
    )
    schema = load_settings(path, environ={}).types["mail"].payload_schema
    assert schema is not None and schema["const"] == {"pattern": "(?=x)"}


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


@pytest.mark.parametrize("value", ["1979-05-27", "07:32:00", "1979-05-27T07:32:00Z"])
def test_hardening_34_a_schedule_payload_with_a_toml_date_or_time_is_refused(
    tmp_path: Path, value: str
) -> None:
    """JSON has no dates: ``serve`` stopped with a traceback when it stored the payload."""
    toml = '[types.noop]\n[schedules.tick]\nevery_seconds = 60\ntype = "noop"\n'
    line = refused(tmp_path, toml + f"payload = {{ when = {value} }}\n")
    assert line.startswith("schedules.tick.payload: ") and "write it as a string" in line, line


@pytest.mark.parametrize(
    ("toml", "setting"),
    [
        ("[types.t]\nlease_seconds = true\n", "types.t.lease_seconds"),
        ("[types.t]\nmax_retries = 2.0\n", "types.t.max_retries"),
        ('sweep_interval_seconds = "1"\n', "sweep_interval_seconds"),
        ('[limits]\nmax_request_bytes = "2048"\n', "limits.max_request_bytes"),
        ("[limits]\nmax_request_bytes = true\n", "limits.max_request_bytes"),
        ("[server]\notel = 1\n", "server.otel"),
        ('[server]\notel = "yes"\n', "server.otel"),
        ("[retention]\ncompleted_seconds = false\n", "retention.completed_seconds"),
    ],
)
def test_hardening_34_a_setting_of_another_type_than_its_own_is_refused(
    tmp_path: Path, toml: str, setting: str
) -> None:
    """true was taken for 1 second, "2048" for a number, 1 for true: each setting read its
    own way, where others (concurrency = "2") were refused."""
    line = refused(tmp_path, toml)
    assert line.startswith(f"{setting}: ") and "should be a valid" in line, line


def test_hardening_34_the_environment_s_text_is_read_as_its_setting_s_type(
    tmp_path: Path,
) -> None:
    environ = {
        "QUEUELOG_OTEL": "true",
        "QUEUELOG_RATE_BURST": "10",
        "QUEUELOG_SWEEP_INTERVAL_SECONDS": "0.5",
        "QUEUELOG_DURABILITY": "normal",
    }
    settings = load_settings(None, environ=environ)
    assert settings.server.otel is True and settings.limits.rate_burst == 10
    assert settings.sweep_interval_seconds == 0.5 and settings.durability == "normal"
    assert load_settings(None, environ={"QUEUELOG_OTEL": "1"}).server.otel is True
    line = refused(tmp_path, "", {"QUEUELOG_RATE_BURST": "ten"})
    assert line.startswith("QUEUELOG_RATE_BURST (limits.rate_burst): "), line


@pytest.mark.parametrize(
    ("toml", "environ", "setting"),
    [
        ("[limits]\nrate_per_second = 1e-320\n", {}, "limits.rate_per_second"),
        ("[limits]\nrate_per_second = 1e-9\n", {}, "limits.rate_per_second"),
        ("", {"QUEUELOG_RATE_PER_SECOND": "5e-324"}, "QUEUELOG_RATE_PER_SECOND"),
        ("[limits]\nrate_burst = 1000000001\n", {}, "limits.rate_burst"),
        ("", {"QUEUELOG_RATE_BURST": "9" * 400}, "QUEUELOG_RATE_BURST"),
    ],
)
def test_hardening_93_a_key_rate_its_token_bucket_cannot_count_is_refused(
    tmp_path: Path, toml: str, environ: dict[str, str], setting: str
) -> None:
    """A 429 says when a token comes back, 1 / rate seconds at most: at 1e-320 a second
    that wait was no number, and every request past the burst was a 500; a burst of 400
    digits was no float, and every request a 500."""
    line = refused(tmp_path, toml, environ)
    assert line.startswith(setting), line
    if "rate_per_second" in line:
        assert "0 (off) or at least one a year" in line, line
    for rate in ("0", "3.2e-8", "0.5"):
        limits = load_settings(None, environ={"QUEUELOG_RATE_PER_SECOND": rate}).limits
        assert limits.rate_per_second == float(rate)


@pytest.mark.parametrize("status", ["completed", "cancelled", "failed"])
def test_hardening_94_a_retention_longer_than_a_century_is_refused(
    tmp_path: Path, status: str
) -> None:
    """The pruner's cutoff is now less the retention: 3,170 years reached before the year
    1, and every pass of the pruner failed with a traceback, pruning nothing at all."""
    line = refused(tmp_path, f"[retention]\n{status}_seconds = 100000000000\n")
    assert line.startswith(f"retention.{status}_seconds: "), line
    path = tmp_path / "century.toml"
    path.write_text(f"[retention]\n{status}_seconds = {100 * 366 * 86_400}\n")
    cutoffs = load_settings(path, environ={}).retention.cutoffs(datetime.now(UTC))
    assert cutoffs[JobStatus(status)].year < 1930


@pytest.mark.parametrize("seconds", ["0.001", "1e-9", "5e-324"])
def test_hardening_95_a_sweep_more_often_than_every_10_ms_is_refused(
    tmp_path: Path, seconds: str
) -> None:
    environ = {"QUEUELOG_SWEEP_INTERVAL_SECONDS": seconds}
    line = refused(tmp_path, "", environ)
    assert line.startswith("QUEUELOG_SWEEP_INTERVAL_SECONDS (sweep_interval_seconds): "), line
    line = refused(tmp_path, f"sweep_interval_seconds = {seconds}\n")
    assert line.startswith("sweep_interval_seconds: "), line
    environ["QUEUELOG_SWEEP_INTERVAL_SECONDS"] = "0.01"
    assert load_settings(None, environ=environ).sweep_interval_seconds == 0.01


@pytest.mark.parametrize("limit", ["max_payload_bytes", "max_result_bytes"])
def test_hardening_108_a_payload_or_result_limit_no_request_can_carry_is_refused(
    tmp_path: Path, limit: str
) -> None:
    """A payload or result between max_request_bytes and its own limit was 413
    body-too-large, not the 422 payload-too-large its limit promises, and a worker's
    completion carrying such a result never landed. A request holds more than its
    payload: the limit leaves it 4,096 bytes for the rest."""
    other = ({"max_payload_bytes", "max_result_bytes"} - {limit}).pop()
    for request, given in ((5120, 65536), (8192, 8192), (8192, 4097)):
        toml = f"[limits]\nmax_request_bytes = {request}\n{limit} = {given}\n{other} = 2\n"
        line = refused(tmp_path, toml)
        assert line == f"limits: {limit} must be at most max_request_bytes less 4096", line
    environ = {"QUEUELOG_MAX_REQUEST_BYTES": "4096"}
    assert refused(tmp_path, "", environ).startswith("limits: max_payload_bytes must be")
    path = tmp_path / "room.toml"
    path.write_text(f"[limits]\nmax_request_bytes = 8192\n{limit} = 4096\n{other} = 2\n")
    assert getattr(load_settings(path, environ={}).limits, limit) == 4096
