"""``queuelog jobs wait`` and ``queuelog enqueue --wait`` against a real server: the result
printed, and the exit codes for completed (0), failed or cancelled (1) and late (5)."""

from __future__ import annotations

import json
import threading

from queuelog.client import Client
from tests.client.test_cli import cli, one_line_error
from tests.realserver import RealServer


def _complete_next(server: RealServer, result: dict[str, object]) -> threading.Thread:
    """Claim the next send_email job (enqueued already, or about to be) and complete it."""

    def complete() -> None:
        with Client(server.url, server.keys["mailer"]) as mailer:
            for _ in range(100):  # bounded
                held = mailer.claim(types=["send_email"], wait_seconds=1)
                if held:
                    mailer.complete(held[0], result)
                    return

    thread = threading.Thread(target=complete, daemon=True)
    thread.start()
    return thread


def test_jobs_wait_prints_the_result_and_exits_0(real_server: RealServer) -> None:
    with Client(real_server.url, real_server.keys["shop"]) as shop:
        job = shop.enqueue("send_email", {"to": "a@b.c"})
    completing = _complete_next(real_server, {"sent": 1})
    done = cli(real_server, "shop", "jobs", "wait", str(job.id), "--timeout", "60")
    completing.join(timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"sent": 1}
    shown = cli(real_server, "shop", "jobs", "wait", str(job.id), "--json")
    assert json.loads(shown.stdout)["status"] == "completed"


def test_jobs_wait_exits_1_for_a_cancelled_job_and_5_when_time_is_up(
    real_server: RealServer,
) -> None:
    with Client(real_server.url, real_server.keys["shop"]) as shop:
        job = shop.enqueue("noop", delay_seconds=3600)
        late = cli(real_server, "shop", "jobs", "wait", str(job.id), "--timeout", "0.5")
        assert late.returncode == 5
        assert one_line_error(late) == f"Error: job {job.id} is still pending"
        shop.cancel(job)
    cancelled = cli(real_server, "shop", "jobs", "wait", str(job.id))
    assert cancelled.returncode == 1 and cancelled.stdout == ""
    assert one_line_error(cancelled) == f"Error: job {job.id} cancelled"
    missing = cli(real_server, "shop", "jobs", "wait", "999999999")
    assert missing.returncode == 1 and "not-found" in one_line_error(missing)


def test_enqueue_wait_prints_the_result(real_server: RealServer) -> None:
    completing = _complete_next(real_server, {"ok": True})
    done = cli(real_server, "shop", "enqueue", "send_email", '{"to": "x@y.z"}', "--wait", "60")
    completing.join(timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"ok": True}


def test_enqueue_takes_a_unique_key(real_server: RealServer) -> None:
    args = ("enqueue", "noop", '{"v": 1}', "--unique-key", "cli-unique", "--json")
    first = json.loads(cli(real_server, "shop", *args).stdout)
    again = cli(
        real_server,
        "shop",
        "enqueue",
        "noop",
        '{"v": 2}',
        "--unique-key",
        "cli-unique",
        "--on-duplicate",
        "replace",
        "--json",
    )
    assert json.loads(again.stdout)["id"] == first["id"]
    assert json.loads(again.stdout)["payload"] == {"v": 2}
    assert first["unique_key"] == "cli-unique"
    bad = cli(real_server, "shop", "enqueue", "--from-file", "-", "--unique-key", "k")
    assert bad.returncode == 2


def test_hardening_43_a_result_s_terminal_controls_are_printed_as_json_escapes(
    real_server: RealServer,
) -> None:
    """A worker's result may hold what a terminal acts on (a lone CSI, a bidirectional
    override): `jobs wait` and `enqueue --wait` print them as JSON escapes, so the
    terminal shows them and the printed JSON is still the result."""
    result = {"v": "\x9b2J\x1b[31mowned", "f": "invoice\u202egnp.exe", "name": "Zoë"}
    for args in (("enqueue", "send_email", '{"to": "x@y.z"}', "--wait", "60"), None):
        if args is None:
            with Client(real_server.url, real_server.keys["shop"]) as shop:
                job = shop.enqueue("send_email", {"to": "a@b.c"})
            args = ("jobs", "wait", str(job.id), "--timeout", "60")
        completing = _complete_next(real_server, result)
        done = cli(real_server, "shop", *args)
        completing.join(timeout=60)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == result
        assert not {"\x9b", "\x1b", "\u202e"} & set(done.stdout)
        assert "Zoë" in done.stdout


def test_hardening_116_a_result_s_tag_characters_print_as_json_that_reads_back_the_same(
    real_server: RealServer,
) -> None:
    """A tag character (U+E0041) lies beyond the BMP: JSON escapes it as a surrogate
    pair. Five hex digits after ``\\u`` read back as another character and a digit."""
    result = {"f": "invoice.pdf\U000e0041\U000e007f", "g": "x\u202ey"}
    with Client(real_server.url, real_server.keys["shop"]) as shop:
        job = shop.enqueue("send_email", {"to": "a@b.c"})
    completing = _complete_next(real_server, result)
    done = cli(real_server, "shop", "jobs", "wait", str(job.id), "--timeout", "60")
    completing.join(timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == result
    assert "\\udb40\\udc41" in done.stdout and "\U000e0041" not in done.stdout
