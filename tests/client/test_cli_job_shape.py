"""What ``queuelog`` prints of a job is the job as the API shows it, field for field."""

from __future__ import annotations

import json

import httpx

from queuelog.client import Client
from tests.client.test_cli import cli
from tests.realserver import RealServer


def test_hardening_118_a_job_printed_has_the_api_s_fields_and_no_claim_s_own(
    real_server: RealServer,
) -> None:
    """A claim hands its worker the enqueue's trace context; no read of a job shows it,
    so neither does the CLI (with --json, or in the table of `jobs show`)."""
    made = cli(real_server, "shop", "enqueue", "noop", '{"k": 1}', "--json")
    assert made.returncode == 0, made.stderr
    job_id = json.loads(made.stdout)["id"]
    read = httpx.get(
        f"{real_server.url}/jobs/{job_id}",
        headers={"Authorization": f"Bearer {real_server.keys['shop']}"},
        timeout=30,
    )
    shown = cli(real_server, "shop", "jobs", "show", str(job_id), "--json")
    assert set(json.loads(shown.stdout)) == set(read.json()) == set(json.loads(made.stdout))
    table = cli(real_server, "shop", "jobs", "show", str(job_id))
    assert table.returncode == 0 and "trace_context" not in table.stdout


def test_hardening_120_a_dependency_s_result_is_shown_as_json_that_is_still_the_result(
    real_server: RealServer,
) -> None:
    """`jobs show` printed a dependency's result with its hidden characters dropped
    (`"invoicegnp.exe"` for `"invoice\\u202egnp.exe"`): JSON that was not the result, where
    the job's own result keeps them as escapes."""
    result = {"file": "invoice\u202egnp.exe", "tag": "ok\U000e0041"}
    with Client(real_server.url, real_server.keys["shop"]) as shop:
        first = shop.enqueue("slow", {})
        then = shop.enqueue("noop", {}, depends_on=[first.id])
    with Client(real_server.url, real_server.keys["mailer"]) as mailer:
        held = mailer.claim(types=["slow"], wait_seconds=5)
        assert [job.id for job in held] == [first.id]
        mailer.complete(held[0], result)
    shown = cli(real_server, "shop", "jobs", "show", str(then.id))
    assert shown.returncode == 0, shown.stderr
    assert '"invoice\\u202egnp.exe"' in shown.stdout
    assert '"ok\\udb40\\udc41"' in shown.stdout
