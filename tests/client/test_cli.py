"""The ``queuelog`` command talking to a real server: output and documented exit codes."""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from queuelog.cli_batches import batches
from queuelog.client import Client
from tests.realserver import QUEUELOG, RealServer, clean_environ, free_port


def cli(server: RealServer, key: str | None, *args: str) -> subprocess.CompletedProcess[str]:
    env = server.client_env(server.keys.get(key, key) if key else None)
    return subprocess.run(
        [QUEUELOG, *args], capture_output=True, text=True, env=env, timeout=120, check=False
    )


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def test_enqueue_prints_the_job_and_show_and_events_read_it(real_server: RealServer) -> None:
    done = cli(
        real_server, "shop", "enqueue", "send_email", '{"to": "a@b.c"}', "--priority", "high"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("job ") and "pending (send_email, high)" in done.stdout
    job_id = done.stdout.split()[1]
    shown = cli(real_server, "shop", "jobs", "show", job_id, "--json")
    assert shown.returncode == 0 and json.loads(shown.stdout)["payload"] == {"to": "a@b.c"}
    # The job as the API shows it: none of the SDK's own parts of a job.
    assert not {"lease_token", "progress_to", "dependencies_from"} & set(json.loads(shown.stdout))
    table = cli(real_server, "shop", "jobs", "show", job_id)
    assert "send_email" in table.stdout and "a@b.c" in table.stdout
    assert "lease_token" not in table.stdout and "progress_to" not in table.stdout
    events = cli(real_server, "shop", "jobs", "events", job_id, "--json")
    assert [e["event"] for e in json.loads(events.stdout)] == ["enqueued"]
    assert "enqueued" in cli(real_server, "shop", "jobs", "events", job_id).stdout


def test_enqueue_with_an_idempotency_key_twice_gives_one_job(real_server: RealServer) -> None:
    args = ("enqueue", "noop", "--idempotency-key", "cli-once", "--json")
    first = json.loads(cli(real_server, "shop", *args).stdout)
    second = json.loads(cli(real_server, "shop", *args).stdout)
    assert first["id"] == second["id"] and first["idempotency_key"] == "cli-once"


def test_enqueue_from_file_sends_batches(real_server: RealServer, tmp_path: Path) -> None:
    lines = [json.dumps({"type": "noop", "payload": {"line": i}}) for i in range(250)]
    path = tmp_path / "jobs.jsonl"
    path.write_text("\n".join(lines) + "\n\n")
    done = cli(real_server, "shop", "enqueue", "--from-file", str(path), "--batch-size", "100")
    assert done.returncode == 0, done.stderr
    assert "enqueued 250 jobs (250 new, 0 existing)" in done.stdout
    again = cli(real_server, "shop", "enqueue", "--from-file", str(path), "--json")
    assert json.loads(again.stdout) == {"enqueued": 250, "new": 250, "existing": 0}
    path.write_text("\n".join([*lines[:3], json.dumps({"type": "no_such_type"})]))
    bad = cli(real_server, "shop", "enqueue", "--from-file", str(path), "--batch-size", "2")
    said = bad.stderr.strip().splitlines()[-1]
    assert bad.returncode == 1 and "line 4 refused; lines 1-2 were enqueued, none after" in said


@pytest.mark.parametrize(
    "refused",
    [{"type": "no_such_type"}, {"type": "noop", "priority": "urgent"}],  # the intake; the schema
)
def test_enqueue_from_file_names_the_line_refused(
    real_server: RealServer, tmp_path: Path, refused: dict[str, Any]
) -> None:
    path = tmp_path / "jobs.jsonl"
    good = json.dumps({"type": "noop", "payload": {"n": 1}})
    path.write_text("\n".join([good, "", good, json.dumps(refused), good]) + "\n")
    before = len(json.loads(cli(real_server, "root", "jobs", "list", "--json").stdout))
    bad = cli(real_server, "shop", "enqueue", "--from-file", str(path))
    (said,) = bad.stderr.strip().splitlines()  # no progress bar outside a terminal
    assert bad.returncode == 1 and said.startswith("Error: line 4 refused; none enqueued: ")
    assert "jobs." not in said  # the line is named: not the batch's own item number
    assert len(json.loads(cli(real_server, "root", "jobs", "list", "--json").stdout)) == before


def test_enqueue_from_file_says_a_line_too_large_for_a_request_was_refused(
    real_server: RealServer, tmp_path: Path
) -> None:
    """A 413 is a refusal of the whole batch (nothing stored), not an unknown outcome."""
    path = tmp_path / "jobs.jsonl"
    big = json.dumps({"type": "noop", "payload": {"text": "x" * 1_200_000}})
    path.write_text("\n".join([json.dumps({"type": "noop"}), big]) + "\n")
    done = cli(real_server, "shop", "enqueue", "--from-file", str(path))
    said = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 1
    assert said.startswith("Error: line 2 refused; line 1 was enqueued, none after: ")


def test_enqueue_from_file_to_no_server_names_no_line_as_refused(
    real_server: RealServer, tmp_path: Path
) -> None:
    path = tmp_path / "jobs.jsonl"
    path.write_text("\n".join(json.dumps({"type": "noop"}) for _ in range(3)) + "\n")
    url = f"http://127.0.0.1:{free_port()}"
    done = cli(real_server, "shop", "enqueue", "--from-file", str(path), "--url", url)
    said = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 4 and said.startswith("Error: lines 1-3 not known to be enqueued: ")


def test_on_duplicate_without_a_unique_key_is_bad_usage(real_server: RealServer) -> None:
    done = cli(real_server, "shop", "enqueue", "noop", "--on-duplicate", "replace")
    assert done.returncode == 2 and "--on-duplicate needs --unique-key" in done.stderr


def test_enqueue_depends_on_makes_a_job_that_waits_for_them(real_server: RealServer) -> None:
    first = json.loads(cli(real_server, "shop", "enqueue", "noop", "--json").stdout)
    second = json.loads(cli(real_server, "shop", "enqueue", "noop", "--json").stdout)
    args = ["--depends-on", str(first["id"]), "--depends-on", str(second["id"])]
    done = cli(real_server, "shop", "enqueue", "noop", *args, "--on-dependency-failure", "run")
    assert done.returncode == 0, done.stderr
    assert " waiting (noop, " in done.stdout
    job_id = done.stdout.split()[1]
    job = json.loads(cli(real_server, "shop", "jobs", "show", job_id, "--json").stdout)
    assert job["depends_on"] == [first["id"], second["id"]]
    for dependency in (first, second):  # ended, not completed: "run" runs it all the same
        assert cli(real_server, "shop", "jobs", "cancel", str(dependency["id"])).returncode == 0
    job = json.loads(cli(real_server, "shop", "jobs", "show", job_id, "--json").stdout)
    assert job["status"] == "pending"


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--on-dependency-failure", "run"], "--on-dependency-failure needs --depends-on"),
        ([f"--depends-on={i}" for i in range(1, 102)], "--depends-on names at most 100 jobs"),
        (["--depends-on", "0"], "Invalid value for '--depends-on'"),
    ],
)
def test_dependency_options_the_server_would_refuse_are_bad_usage(
    real_server: RealServer, args: list[str], said: str
) -> None:
    done = cli(real_server, "shop", "enqueue", "noop", *args)
    assert done.returncode == 2 and said in done.stderr, done.stderr


def test_jobs_list_cancel_and_retry(real_server: RealServer) -> None:
    job = json.loads(cli(real_server, "shop", "enqueue", "noop", "--json").stdout)
    listed = json.loads(cli(real_server, "root", "jobs", "list", "--json", "--limit", "5").stdout)
    assert len(listed) == 5 and listed[0]["id"] >= job["id"]
    table = cli(real_server, "shop", "jobs", "list", "--status", "pending", "--type", "noop")
    assert table.returncode == 0 and "pending" in table.stdout
    cancelled = cli(real_server, "shop", "jobs", "cancel", str(job["id"]))
    assert cancelled.stdout.strip() == f"job {job['id']} cancelled"
    again = cli(real_server, "shop", "jobs", "cancel", str(job["id"]))
    assert again.returncode == 1 and "invalid-state" in one_line_error(again)
    forbidden = cli(real_server, "shop", "jobs", "retry", str(job["id"]))
    assert forbidden.returncode == 3 and "forbidden" in one_line_error(forbidden)
    redriven = cli(real_server, "root", "jobs", "retry", str(job["id"]))
    assert redriven.stdout.strip() == f"job {job['id']} pending"


def test_refused_requests_exit_1_with_one_line(real_server: RealServer) -> None:
    unknown = cli(real_server, "shop", "enqueue", "no_such_type")
    assert unknown.returncode == 1 and "unknown-job-type" in one_line_error(unknown)
    missing = cli(real_server, "shop", "jobs", "show", "999999")
    assert missing.returncode == 1 and "not-found" in one_line_error(missing)
    invalid = cli(real_server, "shop", "enqueue", "send_email", '{"no": "to"}')
    assert invalid.returncode == 1 and "validation" in one_line_error(invalid)
    # The fields the server named come with it, so the line says what to mend.
    assert '; payload: "to" is a required property (validation)' in one_line_error(invalid)


def test_a_refused_field_is_said_once_and_in_words(real_server: RealServer) -> None:
    cron = cli(real_server, "root", "schedules", "create", "bad", "noop", "--cron", "61 * * * *")
    line = one_line_error(cron)
    assert cron.returncode == 1 and line.count("not a valid cron expression") == 1, line
    create = ("schedules", "create", "Nightly", "noop", "--cron", "0 2 * * *")
    named = cli(real_server, "root", *create)
    line = one_line_error(named)
    assert named.returncode == 1 and "name: String should be 1-64 of a-z 0-9 _ . -" in line
    assert "pattern" not in line


def test_bad_key_exits_3(real_server: RealServer) -> None:
    bad = cli(real_server, "ql_not_a_real_key", "jobs", "list")
    assert bad.returncode == 3 and "unauthenticated" in one_line_error(bad)
    missing = cli(real_server, None, "enqueue", "noop")
    assert missing.returncode == 3
    assert one_line_error(missing).endswith("; the key is read from --api-key or QUEUELOG_API_KEY")


def test_server_down_exits_4(real_server: RealServer) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    done = cli(real_server, "shop", "enqueue", "noop", "--url", url)
    assert done.returncode == 4 and "cannot reach" in one_line_error(done)


@pytest.mark.parametrize(
    "url",
    [
        "ftp://127.0.0.1:21",
        "file:///etc/passwd",
        "not a url",
        "http://127.0.0.1:99999",
        "http://127.0.0.1:8000/?",  # every call's path would follow the query
        "http://127.0.0.1:8000/#top",
    ],
)
def test_hardening_27_a_server_url_that_is_not_http_is_bad_usage(
    real_server: RealServer, url: str
) -> None:
    done = cli(real_server, "shop", "jobs", "list", "--url", url)
    assert done.returncode == 2 and "--url" in done.stderr


@pytest.mark.parametrize("key", ["cl\u00e9", "ql_a\nb", "ql_a\r\nX-Admin: 1"])
def test_hardening_33_a_key_no_header_can_carry_is_bad_usage(
    real_server: RealServer, key: str
) -> None:
    by_option = cli(real_server, "shop", "jobs", "list", "--api-key", key)
    from_environment = cli(real_server, key, "jobs", "list")
    for done in (by_option, from_environment):
        assert done.returncode == 2 and "visible ASCII" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr and key not in done.stderr
    bad_url = cli(real_server, "shop", "jobs", "list", "--url", f"{real_server.url}/caf\u00e9")
    assert bad_url.returncode == 2 and "Traceback" not in bad_url.stderr


def test_an_empty_url_is_the_environment_s(real_server: RealServer) -> None:
    assert cli(real_server, "shop", "jobs", "list", "--url", "").returncode == 0


def test_bad_usage_exits_2(real_server: RealServer) -> None:
    assert cli(real_server, "shop", "enqueue", "noop", "{not json").returncode == 2
    assert cli(real_server, "shop", "enqueue", "noop", "[1]").returncode == 2
    neither = cli(real_server, "shop", "enqueue")
    assert neither.returncode == 2 and "not both" not in neither.stderr
    assert cli(real_server, "mailer", "worker", "no_such_module:worker").returncode == 2
    nothing = cli(real_server, "mailer", "worker", "examples.mailer:nothing")
    assert nothing.returncode == 2 and "examples.mailer has no nothing" in nothing.stderr
    not_worker = cli(real_server, "mailer", "worker", "examples.mailer:logging")
    assert not_worker.returncode == 2 and "is not a queuelog.Worker" in not_worker.stderr


@pytest.mark.parametrize(
    "value",
    [
        "NaN",
        "Infinity",
        "-Infinity",
        "1e999",
        '"\\ud800"',
        pytest.param("[" * 3000 + "]" * 3000, id="nested-3000-deep"),  # the reader's stack
    ],
)
def test_hardening_19_json_values_the_server_refuses_exit_2_without_a_traceback(
    real_server: RealServer, tmp_path: Path, value: str
) -> None:
    payload = f'{{"n": {value}}}'
    path = tmp_path / "jobs.jsonl"
    path.write_text(f'{{"type": "noop", "payload": {payload}}}\n')
    for args in (
        ("enqueue", "noop", payload),
        ("enqueue", "--from-file", str(path)),
        ("schedules", "create", "tick", "noop", payload, "--every-seconds", "60"),
    ):
        done = cli(real_server, "root", *args)
        assert done.returncode == 2, (args, done.stderr)
        assert "Traceback" not in done.stderr
        assert "not JSON: " in done.stderr


@pytest.mark.parametrize("seconds", ["nan", "inf", "-1"])
def test_hardening_19_a_time_to_wait_that_is_not_a_number_of_seconds_exits_2(
    real_server: RealServer, seconds: str
) -> None:
    for args in (
        ("jobs", "wait", "1", "--timeout", seconds),
        ("enqueue", "noop", "--wait", seconds),
    ):
        done = cli(real_server, "shop", *args)
        assert done.returncode == 2 and "not a number of seconds" in done.stderr, done.stderr


def test_worker_with_a_bad_key_exits_3(real_server: RealServer) -> None:
    done = cli(real_server, "ql_not_a_real_key", "worker", "examples.mailer:worker")
    assert done.returncode == 3
    assert "unauthenticated" in done.stderr.strip().splitlines()[-1]


def test_help_documents_the_exit_codes(real_server: RealServer) -> None:
    for args in ((), ("enqueue",), ("worker",), ("jobs", "list")):
        done = cli(real_server, None, *args, "--help")
        assert "Exit codes:" in done.stdout and "4  the server could not be reached" in done.stdout


def run_worker(
    server: RealServer, tmp_path: Path, target: str, *options: str, **env: str
) -> subprocess.CompletedProcess[str]:
    """``queuelog worker TARGET`` as the worker key, importing modules from ``tmp_path``."""
    return subprocess.run(
        [QUEUELOG, "worker", target, *options],
        capture_output=True,
        text=True,
        env={**server.client_env(server.keys["mailer"]), **env},
        cwd=tmp_path,
        timeout=120,
        check=False,
    )


def test_worker_modules_that_cannot_load_exit_2_with_one_line(
    real_server: RealServer, tmp_path: Path
) -> None:
    (tmp_path / "broken_syntax.py").write_text("def oops(:\n")
    (tmp_path / "broken_import.py").write_text("1 / 0\n")
    (tmp_path / "no_handlers.py").write_text("from queuelog import Worker\nworker = Worker()\n")
    for target in ["broken_syntax:worker", "broken_import:worker", "no_handlers:worker"]:
        done = run_worker(real_server, tmp_path, target)
        assert done.returncode == 2, (target, done.stderr)
        assert "Traceback" not in done.stderr
        assert "Error: Invalid value" in done.stderr.strip().splitlines()[-1]


PROBE = """
import dataclasses, json, os
from queuelog import Worker

class Probe(Worker):
    def run(self, client=None, *, url=None, api_key=None):  # writes the options it would run with
        with open(os.environ["PROBE_OUT"], "w") as out:
            json.dump(dataclasses.asdict(self.options), out)

worker = Probe(concurrency=3)
worker.handler("noop")(print)
"""


def run_probe(
    server: RealServer, tmp_path: Path, *options: str
) -> subprocess.CompletedProcess[str]:
    (tmp_path / "probe.py").write_text(PROBE)
    out = str(tmp_path / "out.json")
    return run_worker(server, tmp_path, "probe:worker", *options, PROBE_OUT=out)


def test_worker_options_given_on_the_command_line_replace_the_modules_own(
    real_server: RealServer, tmp_path: Path
) -> None:
    done = run_probe(real_server, tmp_path, "--linger-ms", "0", "--prefetch", "7")
    assert done.returncode == 0, done.stderr
    options = json.loads((tmp_path / "out.json").read_text())
    assert (options["linger_ms"], options["prefetch"], options["concurrency"]) == (0, 7, 3)
    assert run_probe(real_server, tmp_path).returncode == 0
    options = json.loads((tmp_path / "out.json").read_text())
    assert (options["linger_ms"], options["prefetch"], options["concurrency"]) == (10, None, 3)


@pytest.mark.parametrize("linger", ["-1", "1001", "ten"])
def test_worker_linger_outside_0_to_1000_ms_exits_2(
    real_server: RealServer, tmp_path: Path, linger: str
) -> None:
    done = run_probe(real_server, tmp_path, "--linger-ms", linger)
    assert done.returncode == 2 and "--linger-ms" in done.stderr
    assert not (tmp_path / "out.json").exists()


def test_input_that_is_not_utf8_exits_2_with_one_line(
    real_server: RealServer, tmp_path: Path
) -> None:
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(
        b'{"type": "noop", "payload": {"name": "caf\\xe9"}}\n'.replace(b"\\xe9", b"\xe9")
    )
    done = cli(real_server, "shop", "enqueue", "--from-file", str(path))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "not UTF-8" in done.stderr


def test_batches_stay_under_the_request_limit_whatever_the_batch_size() -> None:
    jobs = [{"type": "noop", "payload": {"d": "x" * 100_000}} for _ in range(12)]
    cut = batches(jobs, 500)
    assert [len(b) for b in cut] == [5, 5, 2]
    assert [j for b in cut for j in b] == jobs
    assert [len(b) for b in batches([{"type": "noop"}] * 7, 3)] == [3, 3, 1]


LINK = "[link=https://evil.example/x]see[/link]"
ERROR = "[bold]boom[/] [/] [link=mailto:x@evil.example]see[/]"  # no path for the sanitiser


def on_a_terminal(server: RealServer, key: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``cli`` with rich told it writes to a colour terminal: styles and hyperlinks on."""
    env = {**server.client_env(server.keys[key]), "FORCE_COLOR": "1", "COLUMNS": "300"}
    return subprocess.run(
        [QUEUELOG, *args], capture_output=True, text=True, env=env, timeout=120, check=False
    )


def test_hardening_05_cli_shows_rich_markup_from_job_data_as_literal_text(
    real_server: RealServer,
) -> None:
    made = cli(real_server, "shop", "enqueue", "noop", '{"x": "[/]"}', "--idempotency-key", LINK)
    assert made.returncode == 0, made.stderr
    job_id = made.stdout.split()[1]
    shown = on_a_terminal(real_server, "shop", "jobs", "show", job_id)
    assert shown.returncode == 0 and "Traceback" not in shown.stderr, shown.stderr
    assert '{"x": "[/]"}' in shown.stdout and LINK in shown.stdout
    assert "\x1b]8;" not in shown.stdout  # no terminal hyperlink
    with Client(real_server.url, real_server.keys["mailer"]) as mailer:
        (claimed,) = mailer.claim(types=["noop"], limit=1)
        mailer.fail(claimed, ERROR, retryable=False)
    for args in (("jobs", "show"), ("jobs", "events")):
        done = on_a_terminal(real_server, "root", *args, str(claimed.id))
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
        assert ERROR in done.stdout
        assert "\x1b]8;" not in done.stdout


# ESC opening a hyperlink and clearing the screen, BEL, a C1 CSI, backspace, a
# right-to-left override and a zero-width space: each is acted on by a terminal, not shown.
CONTROLS = ("\x1b", "\x07", "\x9b", "\x08", "\u202e", "\u200b", "\r")
NASTY = "a\x1b]8;;https://evil.example/\x07b\x1b[2J\x9bc\x08d\u202ee\u200bf\rg"


def hostile_job(job_id: int) -> dict[str, Any]:
    when = "2026-01-01T00:00:00Z"
    return {
        "id": job_id, "type": f"noop{NASTY}", "payload": {"k": NASTY}, "priority": "medium",
        "status": "failed", "retry_count": 1, "max_retries": 3, "idempotency_key": NASTY,
        "run_at": when, "created_at": when, "updated_at": when, "worker_id": NASTY,
        "error": NASTY, "result": {"k": NASTY},
    }  # fmt: skip


class Answering(BaseHTTPRequestHandler):
    """A fake server's way to answer: JSON, with any headers given."""

    def answer(self, status: int, body: Any, **headers: str) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        for name, value in headers.items():
            self.send_header(name.replace("_", "-"), value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class Hostile(Answering):
    """A server (or a proxy in front of one) that puts terminal controls in every value."""

    def do_GET(self) -> None:
        event = {"at": "2026-01-01T00:00:00Z", "event": NASTY, "from_status": "pending"}
        event |= {"to_status": "running", "actor": NASTY, "detail": NASTY}
        answers: dict[str, tuple[int, Any]] = {
            "/jobs": (200, {"jobs": [hostile_job(1)], "next_cursor": None}),
            "/jobs/1": (200, hostile_job(1)),
            "/jobs/1/events": (200, {"events": [event]}),
        }
        path = self.path.partition("?")[0]
        self.answer(*answers.get(path, (404, {"type": "not-found", "detail": NASTY})))

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path == "/jobs":
            self.answer(201, hostile_job(1))
        elif self.path == "/jobs/claim":  # refused: the worker logs it, then stops
            self.answer(422, {"type": "validation", "detail": NASTY})
        else:
            self.answer(409, {"type": f"invalid-state{NASTY}", "detail": NASTY})


@pytest.fixture
def hostile_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Hostile)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_hardening_05_cli_strips_control_characters_from_server_values(
    hostile_url: str, tmp_path: Path
) -> None:
    (tmp_path / "quiet.py").write_text(  # a worker module that leaves logging to the command
        "from queuelog import Worker\nworker = Worker()\nworker.handler('noop')(print)\n"
    )
    env = clean_environ(QUEUELOG_URL=hostile_url, QUEUELOG_API_KEY="ql_x", COLUMNS="300")
    commands = [
        ("jobs", "list"), ("jobs", "show", "1"), ("jobs", "events", "1"), ("enqueue", "noop"),
        ("jobs", "show", "2"), ("jobs", "retry", "1"),  # refused, with the detail shown
        ("worker", "quiet:worker"),  # the log the command sets up, and its last line
    ]  # fmt: skip
    for args in commands:
        done = subprocess.run(  # bytes: text mode would turn a carriage return into "\n"
            [QUEUELOG, *args], capture_output=True, env=env, cwd=tmp_path, timeout=120, check=False
        )
        printed = (done.stdout + done.stderr).decode()
        assert "Traceback" not in printed, (args, printed)
        assert "]8;;https://evil.example/" in printed, args  # shown, inert
        for control in CONTROLS:
            assert control not in printed, (args, control)


class Redirecting(Answering):
    """A proxy that sends http to https: 301 to every request, with no body."""

    def do_GET(self) -> None:
        self.send_response(301)
        self.send_header("Location", "https://127.0.0.1/")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self) -> None:
        self.do_GET()

    def do_DELETE(self) -> None:
        self.do_GET()


class OtherShape(Answering):
    """A server that answers 200 with JSON that is not the API's."""

    def do_GET(self) -> None:
        self.answer(200, {"ok": True})

    def do_POST(self) -> None:
        self.do_GET()

    def do_DELETE(self) -> None:
        self.do_GET()


@pytest.mark.parametrize("handler", [Redirecting, OtherShape])
def test_hardening_61_cli_does_not_take_an_answer_it_cannot_read_for_success(
    handler: type[Answering],
) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    env = clean_environ(QUEUELOG_URL=f"http://127.0.0.1:{server.server_address[1]}")
    env["QUEUELOG_API_KEY"] = "ql_x"
    commands = [
        ("jobs", "list"), ("jobs", "show", "1"), ("jobs", "cancel", "1"), ("enqueue", "noop"),
        ("types", "list"), ("types", "pause", "noop"), ("schedules", "pause", "nightly"),
    ]  # fmt: skip
    if handler is Redirecting:  # its answer has no body to read: only the status tells
        commands.append(("schedules", "delete", "nightly"))
    try:
        for args in commands:
            done = subprocess.run(
                [QUEUELOG, *args], capture_output=True, text=True, env=env, timeout=120
            )
            assert done.returncode == 4, (args, done.stdout, done.stderr)
            assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1
    finally:
        server.shutdown()
        server.server_close()


class Busy(Answering):
    """A server that answers every request 429, as one under load does."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.answer(429, {"type": "rate-limited", "detail": "slow down"}, Retry_After="0")


def test_enqueue_from_file_does_not_call_a_batch_that_met_429_refused(
    real_server: RealServer, tmp_path: Path
) -> None:
    """The SDK resends after a 429 (and after a broken connection, when an earlier send may
    have been stored): the last answer being 429 says nothing of what was stored."""
    path = tmp_path / "jobs.jsonl"
    path.write_text(json.dumps({"type": "noop"}) + "\n")
    server = ThreadingHTTPServer(("127.0.0.1", 0), Busy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        done = cli(real_server, "shop", "enqueue", "--from-file", str(path), "--url", url)
    finally:
        server.shutdown()
        server.server_close()
    (said,) = done.stderr.strip().splitlines()
    assert done.returncode == 1 and said.startswith("Error: line 1 not known to be enqueued: ")
