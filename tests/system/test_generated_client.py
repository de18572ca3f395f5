"""A client generated from /openapi.json by a well-known generator (openapi-python-client)
enqueues, claims and completes a job against a real server."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.realserver import RealServer, closing

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent
PACKAGE = "queuelog_generated_client"


@pytest.fixture
def generated(tmp_path: Path) -> Iterator[tuple[RealServer, Any]]:
    with closing(RealServer(tmp_path / "server")) as real:
        key = real.create_key("everyone", "producer", "worker")
        real.start()
        spec = tmp_path / "openapi.json"
        spec.write_bytes(httpx.get(f"{real.url}/openapi.json", timeout=30).content)
        output = ["--output-path", str(tmp_path / PACKAGE), "--meta", "none"]
        done = subprocess.run(
            [str(BIN / "openapi-python-client"), "generate", "--path", str(spec), *output],
            env={**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"},
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert "missing" not in done.stdout.lower(), done.stdout
        sys.path.insert(0, str(tmp_path))
        try:
            client = importlib.import_module(PACKAGE).AuthenticatedClient(real.url, token=key)
            yield real, client
        finally:
            sys.path.remove(str(tmp_path))
            for name in [m for m in sys.modules if m.split(".")[0] == PACKAGE]:
                del sys.modules[name]


def test_a_generated_client_enqueues_claims_and_completes_a_job(
    generated: tuple[RealServer, Any],
) -> None:
    _, client = generated
    jobs = importlib.import_module(f"{PACKAGE}.api.jobs")
    workers = importlib.import_module(f"{PACKAGE}.api.workers")
    models = importlib.import_module(f"{PACKAGE}.models")
    importlib.import_module(f"{PACKAGE}.api.jobs.enqueue")
    for name in ("claim", "complete"):
        importlib.import_module(f"{PACKAGE}.api.workers.{name}")
    importlib.import_module(f"{PACKAGE}.api.jobs.get_job")

    body = models.EnqueueRequest.from_dict({"type": "noop", "payload": {"n": 1}})
    job = jobs.enqueue.sync(client=client, body=body)
    assert isinstance(job, models.JobOut), job
    claimed = workers.claim.sync(client=client, body=models.ClaimRequest.from_dict({}))
    assert isinstance(claimed, models.ClaimOut), claimed
    (held,) = claimed.jobs
    assert held.id == job.id
    report = models.CompleteRequest.from_dict({"lease_token": held.lease_token, "result": {}})
    done = workers.complete.sync(job.id, client=client, body=report)
    assert isinstance(done, models.JobOut), done
    assert done.status == "completed"
    problem = jobs.get_job.sync(10**12, client=client)
    assert isinstance(problem, models.ProblemOut) and problem.status == 404
