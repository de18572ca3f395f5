"""Job: a frozen dataclass to the type checker, built without frozen's run-time guard."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from pathlib import Path

from mypy import api as mypy_api

from queuelog.models import Job, JobStatus, Priority

SNIPPET = """
from datetime import UTC, datetime
from queuelog.models import Job, JobStatus, Priority

now = datetime.now(UTC)
job = Job(1, "noop", {}, Priority.LOW, JobStatus.PENDING, 0, 3, "p", None, now, now, now)
job.status = JobStatus.RUNNING
"""


def test_a_job_is_read_only_to_the_type_checker(tmp_path: Path) -> None:
    source = tmp_path / "assign.py"
    source.write_text(SNIPPET)
    out, _, status = mypy_api.run(
        ["--strict", "--no-incremental", "--cache-dir", str(tmp_path / "cache"), str(source)]
    )
    assert status == 1, out
    assert 'Property "status" defined in "Job" is read-only' in out, out
    assert out.count("error:") == 1, out  # the construction itself type-checks


def test_a_job_is_a_dataclass_with_slots_and_value_equality() -> None:
    now = datetime.now(UTC)
    fields = (1, "noop", {"a": 1}, Priority.LOW, JobStatus.PENDING, 0, 3, "p", None, now, now, now)
    job = Job(*fields)
    assert dataclasses.is_dataclass(job) and not hasattr(job, "__dict__")
    assert job == Job(*fields) and job != Job(2, *fields[1:])
    assert [f.name for f in dataclasses.fields(Job)][:3] == ["id", "type", "payload"]
