"""readonly_dataclass (Job, Finished, ...): frozen to the type checker, built without
frozen's run-time guard."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from pathlib import Path

from mypy import api as mypy_api

from queuelog.models import Finished, Job, JobStatus, Priority

SNIPPET = """
from datetime import UTC, datetime
from queuelog.models import Finished, Job, JobStatus, Priority

now = datetime.now(UTC)
job = Job(1, "noop", {}, Priority.LOW, JobStatus.PENDING, 0, 3, "p", None, now, now, now)
job.status = JobStatus.RUNNING
done = Finished(1, JobStatus.COMPLETED)
done.id = 2
"""


def test_a_job_is_read_only_to_the_type_checker(tmp_path: Path) -> None:
    source = tmp_path / "assign.py"
    source.write_text(SNIPPET)
    out, _, status = mypy_api.run(
        ["--strict", "--no-incremental", "--cache-dir", str(tmp_path / "cache"), str(source)]
    )
    assert status == 1, out
    errors = [line for line in out.splitlines() if ": error:" in line]
    # Exactly the two assignments (lines 7 and 9); the constructions type-check.
    assert [line.split(":")[1] for line in errors] == ["7", "9"], out
    assert all("read-only" in line for line in errors), out


def test_a_job_is_a_dataclass_with_slots_and_value_equality() -> None:
    now = datetime.now(UTC)
    fields = (1, "noop", {"a": 1}, Priority.LOW, JobStatus.PENDING, 0, 3, "p", None, now, now, now)
    job = Job(*fields)
    assert dataclasses.is_dataclass(job) and not hasattr(job, "__dict__")
    assert job == Job(*fields) and job != Job(2, *fields[1:])
    # Hashed by value, as a frozen dataclass is (a Job's payload dict makes it unhashable).
    assert hash(Finished(1, JobStatus.COMPLETED)) == hash(Finished(1, JobStatus.COMPLETED))
    assert len({Finished(1, JobStatus.COMPLETED), Finished(1, JobStatus.COMPLETED)}) == 1
    assert [f.name for f in dataclasses.fields(Job)][:3] == ["id", "type", "payload"]
