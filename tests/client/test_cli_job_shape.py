"""What ``queuelog`` prints of a job is the job as the API shows it, field for field."""

from __future__ import annotations

import json

import httpx

from tests.client.test_cli import cli
from tests.realserver import RealServer


def test_hardening_122_a_job_printed_has_the_api_s_fields_and_no_claim_s_own(
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
