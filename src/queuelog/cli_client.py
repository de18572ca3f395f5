"""The commands that talk to a running server: ``worker``, ``enqueue`` and ``jobs``."""

from __future__ import annotations

import dataclasses
import enum
import importlib
import json
import logging
import math
import shutil
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO, TypeVar

import click
from rich.console import Console
from rich.table import Table

from queuelog.cli_batches import enqueue_file, read_jobs
from queuelog.cli_output import (
    Refused,
    ShownFormatter,
    StillRunning,
    literal,
    one_line,
    reported,
    shown,
    shown_json,
)
from queuelog.client import Client, Job, JobTimeout, Worker
from queuelog.client.calls import EnqueueOptions
from queuelog.client.policy import api_key_of, server_url
from queuelog.clock import rfc3339
from queuelog.models import MAX_DEPENDS_ON, MAX_ID, PRIORITY_LABELS, JobStatus
from queuelog.plain_json import strict_json

EXIT_CODES = """\b
Exit codes:
  0  success
  1  the server refused the request (not found, invalid state, validation, ...)
  2  bad usage (unknown option, malformed JSON argument or file), or a command
     whose extra is not installed (serve, migrate, keys: queuelog[server])
  3  missing, unknown or revoked key, or one not allowed this (role, priority
     ceiling, type)
  4  the server could not be reached or failed (5xx)
  5  the time to wait (--timeout, --wait) passed before the job finished
"""
BATCH_MAX = 500

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


def _server_url(_: click.Context, __: click.Parameter, url: str | None) -> str | None:
    try:
        return server_url(url) if url else None  # "": the environment's, else the default
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _api_key(_: click.Context, __: click.Parameter, key: str | None) -> str | None:
    try:
        return api_key_of(key or None)  # "": the environment's
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


url_option = click.option(
    "--url",
    envvar="QUEUELOG_URL",
    callback=_server_url,
    help="Server address (default: $QUEUELOG_URL, else local).",
)
key_option = click.option(
    "--api-key",
    envvar="QUEUELOG_API_KEY",
    callback=_api_key,
    help="API key (default: $QUEUELOG_API_KEY).",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON, not a table.")


def server_call(command: F) -> F:
    """The options of a command that asks the server and prints its answer: ``--url``,
    ``--api-key`` and ``--json``."""
    return url_option(key_option(json_option(command)))


def asked(url: str | None, api_key: str | None, failure: str, call: Callable[[Client], T]) -> T:
    """What ``call`` answers on a client of the server at ``url``; a refusal or failure
    ends the command with one line that begins with ``failure``."""
    with Client(url, api_key) as client, reported(failure):
        return call(client)


# What a claimed job holds for its worker (its lease, its enqueue's trace context, where
# its handler's progress and dependencies() go): the CLI claims no job, and prints none
# of it; no read of a job has these.
_WORKERS_OWN = frozenset({"lease_token", "trace_context", "progress_to", "dependencies_from"})


def to_json(value: Any) -> Any:
    """A client value (dataclass, enum, datetime) as plain JSON data."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = [f for f in dataclasses.fields(value) if f.name not in _WORKERS_OWN]
        return {f.name: to_json(getattr(value, f.name)) for f in fields}
    if isinstance(value, enum.Enum):
        return value.name.lower() if isinstance(value.value, int) else value.value
    if isinstance(value, datetime):  # as the server writes times: always microseconds
        return rfc3339(value)
    if isinstance(value, list | tuple | frozenset):
        return [to_json(v) for v in value]
    if isinstance(value, dict):
        return {k: to_json(v) for k, v in value.items()}
    return value


def print_json(value: Any) -> None:
    click.echo(json.dumps(to_json(value), indent=2, sort_keys=False))


def console() -> Console:
    """Standard output; when it is not a terminal, wide enough not to wrap job rows."""
    return Console(soft_wrap=True, width=shutil.get_terminal_size((160, 24)).columns)


def _when(at: datetime | None) -> str:
    return at.strftime("%Y-%m-%d %H:%M:%S") if at else ""


def print_jobs(jobs: list[Job]) -> None:
    table = Table("id", "type", "status", "priority", "retries used", "run at (UTC)", "worker")
    for job in jobs:
        cells = (
            job.id,
            job.type,
            job.status.value,
            job.priority.label,
            f"{job.retry_count}/{job.max_retries}",
            _when(job.run_at),
            job.worker_id or "",
        )
        table.add_row(*(literal(c) for c in cells))
    console().print(table)


# -- worker ---------------------------------------------------------------------


def load_worker(target: str) -> Worker:
    """The ``Worker`` named by ``MODULE:ATTRIBUTE`` (the current directory is importable)."""
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise click.BadParameter("expected MODULE:WORKER, e.g. examples.mailer:worker")
    sys.path.insert(0, str(Path.cwd()))
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # a syntax error or a failing import is a usage error too
        detail = f"{type(exc).__name__}: {exc}"
        raise click.BadParameter(f"cannot import {module_name}: {detail}") from exc
    if not hasattr(module, attribute):
        raise click.BadParameter(f"{module_name} has no {attribute}")
    worker = getattr(module, attribute)
    if not isinstance(worker, Worker):
        raise click.BadParameter(f"{target} is not a queuelog.Worker")
    if not worker.handlers:
        raise click.BadParameter(f"{target} has no handlers")
    return worker


@click.command(epilog=EXIT_CODES)
@click.argument("target", metavar="MODULE:WORKER")
@url_option
@key_option
@click.option(
    "--concurrency",
    type=click.IntRange(1, 1000),
    help="Jobs run at once (default: the Worker's, 4 unless it sets its own).",
)
@click.option(
    "--prefetch",
    type=click.IntRange(0, 1000),
    help="Jobs claimed ahead of a free handler (default: as the handlers' pace calls for).",
)
@click.option(
    "--linger-ms",
    type=click.IntRange(0, 1000),
    help="How long (ms) a claim with room goes on taking jobs (default: the Worker's).",
)
def worker(
    target: str,
    url: str | None,
    api_key: str | None,
    concurrency: int | None,
    prefetch: int | None,
    linger_ms: int | None,
) -> None:
    """Run the handlers of a Worker until SIGTERM or SIGINT (then finish running jobs)."""
    runtime = load_worker(target)
    given = {"concurrency": concurrency, "prefetch": prefetch, "linger_ms": linger_ms}
    runtime.configure(**{name: value for name, value in given.items() if value is not None})
    if not logging.getLogger().handlers:
        log_lines = logging.StreamHandler()
        log_lines.setFormatter(ShownFormatter("%(asctime)s %(levelname)s %(message)s"))
        logging.basicConfig(level=logging.INFO, handlers=[log_lines])
    with reported("worker stopped"):
        runtime.run(url=url, api_key=api_key)


# -- enqueue ----------------------------------------------------------------------


def finite_seconds(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    """An option's number of seconds: finite and 0 or more (a float option takes nan and
    inf)."""
    if value is not None and not (math.isfinite(value) and value >= 0):
        raise click.BadParameter(f"{value} is not a number of seconds, 0 or more")
    return value


def payload_argument(text: str | None) -> dict[str, Any]:
    if text is None:
        return {}
    try:
        payload = strict_json(text)
    except ValueError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="PAYLOAD_JSON") from exc
    if not isinstance(payload, dict):
        raise click.BadParameter("must be a JSON object", param_hint="PAYLOAD_JSON")
    return payload


@click.command(epilog=EXIT_CODES)
@click.argument("job_type", metavar="TYPE", required=False)
@click.argument("payload", metavar="[PAYLOAD_JSON]", required=False)
@click.option("--priority", type=click.Choice(PRIORITY_LABELS, case_sensitive=False))
@click.option("--idempotency-key", help="Enqueueing again with the same key does nothing.")
@click.option("--group", help="The job's group (a tenant, an account): see group_concurrency.")
@click.option(
    "--from-file",
    type=click.File("r"),
    help="JSON lines, one enqueue body each ('-' for standard input); sent in batches.",
)
@click.option(
    "--batch-size",
    default=100,
    show_default=True,
    type=click.IntRange(1, BATCH_MAX),
    help="Jobs a request. A keyed file whose lines name others (depends_on_items) is sent "
    "again alike only with the same batch size: a job of an earlier batch goes by its id.",
)
@click.option("--unique-key", help="While a job with this key is active, make no other.")
@click.option(
    "--on-duplicate",
    type=click.Choice(["keep", "replace"]),
    help="With --unique-key: keep the active job (default), or give a waiting or pending one "
    "this payload, priority and run time (while it runs: make a new job).",
)
@click.option(
    "--depends-on",
    type=click.IntRange(1, MAX_ID),
    multiple=True,
    help="A job this one waits for (repeat for several): it is waiting until they end.",
)
@click.option(
    "--on-dependency-failure",
    type=click.Choice(["cancel", "run"]),
    help="With --depends-on: cancel this job if one of them fails (default), or run it anyway.",
)
@click.option(
    "--wait",
    "wait_seconds",
    type=float,
    callback=finite_seconds,
    help="Then await the job up to this many seconds and print its result (as `jobs wait`).",
)
@server_call
def enqueue(
    job_type: str | None,
    payload: str | None,
    priority: str | None,
    idempotency_key: str | None,
    group: str | None,
    from_file: TextIO | None,
    batch_size: int,
    unique_key: str | None,
    on_duplicate: str | None,
    depends_on: tuple[int, ...],
    on_dependency_failure: str | None,
    wait_seconds: float | None,
    url: str | None,
    api_key: str | None,
    as_json: bool,
) -> None:
    """Enqueue one job of TYPE, or every job of a JSON-lines file (--from-file)."""
    options = EnqueueOptions(
        priority=priority,
        idempotency_key=idempotency_key,
        group=group,
        unique_key=unique_key,
        on_duplicate=on_duplicate,
        depends_on=depends_on or None,
        on_dependency_failure=on_dependency_failure,
    )
    _check_usage(job_type is not None, from_file is not None, options, wait_seconds)
    with Client(url, api_key) as client:
        if from_file is not None:
            created, existing = enqueue_file(client, read_jobs(from_file), batch_size)
            _say_enqueued(created, existing, as_json)
        else:
            assert job_type is not None
            payload_json = payload_argument(payload)
            _enqueue_one(client, job_type, payload_json, options, wait_seconds, as_json)


def _enqueue_one(
    client: Client,
    job_type: str,
    payload: dict[str, Any],
    options: EnqueueOptions,
    wait_seconds: float | None,
    as_json: bool,
) -> None:
    """Enqueue the job, then print it, or (with ``wait_seconds``) await and print its end."""
    with reported("cannot enqueue"):
        job = client.enqueue(job_type, payload, **options)
    if wait_seconds is not None:
        await_job(client, job.id, wait_seconds, as_json)
    elif as_json:
        print_json(job)
    else:
        click.echo(one_line(f"job {job.id} {job.status.value} ({job.type}, {job.priority.label})"))


def _check_usage(
    one: bool, from_file: bool, options: EnqueueOptions, wait_seconds: float | None
) -> None:
    """Options that do not go together, refused before anything is sent."""
    if one and from_file:
        raise click.UsageError("give TYPE [PAYLOAD_JSON] or --from-file FILE, not both")
    if not one and not from_file:
        raise click.UsageError("give TYPE [PAYLOAD_JSON], or --from-file FILE")
    # A file's line sets its own: given with --from-file, these would be dropped silently.
    given = ["--" + name.replace("_", "-") for name, value in options.items() if value is not None]
    if wait_seconds is not None:
        given.append("--wait")
    if from_file and given:
        named = ", ".join(given)
        raise click.UsageError(f"{named}: for one job; each line of --from-file gives its own")
    if options.get("on_duplicate") is not None and options.get("unique_key") is None:
        raise click.UsageError("--on-duplicate needs --unique-key")
    if options.get("on_dependency_failure") is not None and options.get("depends_on") is None:
        raise click.UsageError("--on-dependency-failure needs --depends-on")
    if len(options.get("depends_on") or ()) > MAX_DEPENDS_ON:
        raise click.UsageError(f"--depends-on names at most {MAX_DEPENDS_ON} jobs")


def _say_enqueued(created: int, existing: int, as_json: bool) -> None:
    total = created + existing
    if as_json:
        print_json({"enqueued": total, "new": created, "existing": existing})
    else:
        jobs = "job" if total == 1 else "jobs"
        click.echo(f"enqueued {total} {jobs} ({created} new, {existing} existing)")


def await_job(client: Client, job_id: int, timeout: float | None, as_json: bool) -> None:
    """Await a job and print it: its result (JSON) once completed; exit 1 if it failed or
    was cancelled, 5 if ``timeout`` seconds passed first."""
    try:
        with reported(f"cannot wait for job {job_id}"):
            job = client.wait(job_id, timeout)
    except JobTimeout as late:
        if as_json:
            print_json(late.job)
        raise StillRunning(f"job {job_id} is still {late.job.status.value}") from None
    if as_json:
        print_json(job)
    elif job.status is JobStatus.COMPLETED:
        click.echo(shown_json(job.result))
    if job.status is not JobStatus.COMPLETED:
        reason = f": {shown(job.error)}" if job.error else ""
        raise Refused(one_line(f"job {job_id} {job.status.value}{reason}"))
