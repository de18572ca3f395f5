"""``queuelog enqueue --from-file`` with a graph of jobs: a line's ``depends_on_items``
names jobs of the file, whatever batch each line travels in."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from queuelog.client import Client
from tests.realserver import QUEUELOG, RealServer


def _enqueue_file(server: RealServer, path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = server.client_env(server.keys["shop"])
    command = [QUEUELOG, "enqueue", "--from-file", str(path), *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)


def _tagged(tag: str, count: int) -> list[dict[str, Any]]:
    """``count`` jobs of a file, each with its ``tag`` and its place ``n``."""
    return [{"type": "noop", "payload": {"tag": tag, "n": n}} for n in range(count)]


def _lines(path: Path, jobs: list[dict[str, Any]]) -> None:
    path.write_text("\n".join(json.dumps(job) for job in jobs) + "\n")


def _made(server: RealServer, tag: str) -> dict[int, Any]:
    """The jobs the file tagged ``tag`` made, by their line's ``n``."""
    with Client(server.url, server.keys["shop"]) as shop:
        found = [job for job in shop.list(type="noop") if job.payload.get("tag") == tag]
    return {job.payload["n"]: job for job in found}


def test_hardening_85_a_file_s_depends_on_items_name_its_lines_whatever_batch_they_travel_in(
    real_server: RealServer, tmp_path: Path
) -> None:
    path = tmp_path / "graph.jsonl"
    jobs = _tagged("graph", 5)
    jobs[3]["depends_on_items"] = [0]  # a job of the batch before
    jobs[4]["depends_on_items"] = [1, 3]  # one of the batch before, one of its own
    _lines(path, jobs)
    done = _enqueue_file(real_server, path, "--batch-size", "3")
    assert done.returncode == 0, done.stderr
    made = _made(real_server, "graph")
    assert made[3].depends_on == (made[0].id,)
    assert sorted(made[4].depends_on) == sorted([made[1].id, made[3].id])
    assert made[3].status.value == made[4].status.value == "waiting"


def _refused_before_sending(
    server: RealServer, tmp_path: Path, tag: str, third: dict[str, Any], batch_size: int
) -> str:
    """A file of three jobs, the third with the fields ``third``, sent in batches of
    ``batch_size``: bad usage before anything is sent (nothing made); what it said."""
    path = tmp_path / f"{tag}.jsonl"
    jobs = _tagged(tag, 3)
    jobs[2].update(third)
    _lines(path, jobs)
    done = _enqueue_file(server, path, "--batch-size", str(batch_size))
    assert done.returncode == 2, done.stderr
    assert _made(server, tag) == {}
    return done.stderr


def test_hardening_85_a_line_naming_its_own_or_a_later_job_is_bad_usage_before_any_is_sent(
    real_server: RealServer, tmp_path: Path
) -> None:
    said = _refused_before_sending(real_server, tmp_path, "late", {"depends_on_items": [2]}, 2)
    assert "line 3: depends_on_items names job 2" in said


def test_a_line_naming_a_job_twice_is_bad_usage_before_any_is_sent(
    real_server: RealServer, tmp_path: Path
) -> None:
    # The server refuses it too, but only once the batches before it were made.
    line = {"depends_on_items": [0, 1, 0]}
    said = _refused_before_sending(real_server, tmp_path, "twice", line, 1)
    assert "line 3: depends_on_items names job 0 twice" in said


def test_hardening_85_a_null_depends_on_is_none_and_the_items_still_name_the_file_s_jobs(
    real_server: RealServer, tmp_path: Path
) -> None:
    path = tmp_path / "null.jsonl"
    jobs = _tagged("null", 4)
    jobs[3].update(depends_on=None, depends_on_items=[0])
    _lines(path, jobs)
    done = _enqueue_file(real_server, path, "--batch-size", "2")
    assert done.returncode == 0, done.stderr
    made = _made(real_server, "null")
    assert made[3].depends_on == (made[0].id,)


def test_hardening_85_a_line_naming_more_jobs_of_earlier_batches_than_ids_allow_is_bad_usage(
    real_server: RealServer, tmp_path: Path
) -> None:
    # Jobs of earlier batches go by id, and depends_on names at most 100: refused by the
    # server, the line would have left the 150 jobs before it made.
    path = tmp_path / "wide.jsonl"
    jobs = _tagged("wide", 151)
    jobs[150]["depends_on_items"] = list(range(150))
    _lines(path, jobs)
    done = _enqueue_file(real_server, path, "--batch-size", "50")
    assert done.returncode == 2, done.stderr
    assert "line 151: waits for 150 jobs by id" in done.stderr
    assert _made(real_server, "wide") == {}
    assert _enqueue_file(real_server, path, "--batch-size", "500").returncode == 0
    made = _made(real_server, "wide")
    assert len(made[150].depends_on) == 150


def test_hardening_85_a_line_naming_more_than_100_ids_is_bad_usage_in_any_batch(
    real_server: RealServer, tmp_path: Path
) -> None:
    line = {"depends_on": list(range(1, 102))}
    said = _refused_before_sending(real_server, tmp_path, "ids", line, 1)
    assert "line 3: waits for 101 jobs by id" in said


def test_hardening_85_a_keyed_file_sent_again_with_the_same_batch_size_makes_nothing(
    real_server: RealServer, tmp_path: Path
) -> None:
    path = tmp_path / "again.jsonl"
    jobs = [{**job, "idempotency_key": f"again-{n}"} for n, job in enumerate(_tagged("again", 5))]
    jobs[4]["depends_on_items"] = [0, 3]
    _lines(path, jobs)
    for _ in range(2):
        done = _enqueue_file(real_server, path, "--batch-size", "2", "--json")
        assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"enqueued": 5, "new": 0, "existing": 5}
    assert len(_made(real_server, "again")) == 5


def test_hardening_117_one_job_s_options_beside_a_file_are_bad_usage_not_dropped(
    real_server: RealServer, tmp_path: Path
) -> None:
    """A file's line gives its own fields: a --priority, --group or --idempotency-key
    beside --from-file applied to no line, so the same command sent twice made each
    job twice though it named a key."""
    path = tmp_path / "options.jsonl"
    _lines(path, _tagged("options", 1))
    for option, value in (
        ("--idempotency-key", "file-once"),
        ("--priority", "high"),
        ("--group", "tenant-1"),
        ("--depends-on", "1"),
    ):
        done = _enqueue_file(real_server, path, option, value)
        assert done.returncode == 2, done.stderr
        assert option in done.stderr and "Traceback" not in done.stderr
    assert _made(real_server, "options") == {}
