"""``queuelog jobs``: list, show, follow and redrive jobs on a running server."""

from __future__ import annotations

import itertools
import json

import click
from rich.table import Table

from queuelog.cli_client import (
    EXIT_CODES,
    asked,
    await_job,
    console,
    finite_seconds,
    print_jobs,
    print_json,
    server_call,
    to_json,
)
from queuelog.cli_output import literal, one_line, reported, shown_json
from queuelog.client import Client, Dependency, Job
from queuelog.models import JobStatus

# `jobs show` lists this many dependents at most (a fan-out may have thousands).
DEPENDENTS_SHOWN = 100


@click.group(epilog=EXIT_CODES)
def jobs() -> None:
    """List and inspect jobs; cancel or redrive them."""


@jobs.command("list", epilog=EXIT_CODES)
@click.option("--status", type=click.Choice([s.value for s in JobStatus]))
@click.option("--type", "job_type", help="Only jobs of this type.")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 100_000))
@click.option(
    "--depends-on", type=click.IntRange(min=1), help="Only the jobs that depend on this job."
)
@server_call
def list_jobs(
    status: str | None,
    job_type: str | None,
    limit: int,
    depends_on: int | None,
    url: str | None,
    api_key: str | None,
    as_json: bool,
) -> None:
    """The newest visible jobs (following pages up to --limit)."""
    with Client(url, api_key) as client, reported("cannot list jobs"):
        size = min(limit, 500)
        pages = client.list(status=status, type=job_type, page_size=size, depends_on=depends_on)
        found = list(itertools.islice(pages, limit))
    if as_json:
        print_json(found)
    else:
        print_jobs(found)


@jobs.command("show", epilog=EXIT_CODES)
@click.argument("job_id", type=int)
@server_call
def show(job_id: int, url: str | None, api_key: str | None, as_json: bool) -> None:
    """Every field of one job, then the jobs it depends on and the jobs that depend on it
    (with --json: the job alone)."""
    with Client(url, api_key) as client, reported(f"cannot show job {job_id}"):
        job = client.get(job_id)
        if as_json:
            print_json(job)
            return
        dependencies = client.dependencies(job_id) if job.depends_on else []
        dependents = client.list_page(limit=DEPENDENTS_SHOWN, depends_on=job_id)
    table = Table("field", "value", show_header=False)
    for name, value in _fields(job):
        table.add_row(name, literal(value))
    console().print(table)
    if dependencies:
        _print_dependencies(dependencies)
    if dependents.jobs:
        click.echo("dependents:")
        print_jobs(dependents.jobs)
    if dependents.next_cursor is not None:
        click.echo(f"(the first {DEPENDENTS_SHOWN}: queuelog jobs list --depends-on {job_id})")


def _print_dependencies(dependencies: list[Dependency]) -> None:
    click.echo("dependencies:")
    table = Table("id", "type", "status", "result")
    for dep in dependencies:
        # JSON that is still the result, hidden characters escaped (not dropped, as text is).
        result = "" if dep.result is None else shown_json(dep.result)
        table.add_row(*(literal(c) for c in (dep.id, dep.type, dep.status.value, result)))
    console().print(table)


def _fields(job: Job) -> list[tuple[str, str]]:
    return [(k, _cell(v)) for k, v in to_json(job).items()]


def _cell(value: object) -> str:
    if value is None:
        return ""
    return json.dumps(value) if isinstance(value, dict | list) else str(value)


@jobs.command("wait", epilog=EXIT_CODES)
@click.argument("job_id", type=int)
@click.option(
    "--timeout",
    type=float,
    callback=finite_seconds,
    help="Give up after this many seconds (exit 5); default: wait as long as it takes.",
)
@server_call
def wait(
    job_id: int, timeout: float | None, url: str | None, api_key: str | None, as_json: bool
) -> None:
    """Await a job's end and print its result: exit 0 once completed, 1 if it failed or was
    cancelled."""
    with Client(url, api_key) as client:
        await_job(client, job_id, timeout, as_json)


@jobs.command("events", epilog=EXIT_CODES)
@click.argument("job_id", type=int)
@server_call
def events(job_id: int, url: str | None, api_key: str | None, as_json: bool) -> None:
    """A job's history, oldest first."""
    history = asked(url, api_key, f"cannot read events of job {job_id}", lambda c: c.events(job_id))
    if as_json:
        print_json(history)
        return
    table = Table("at (UTC)", "event", "from", "to", "actor", "detail")
    for event in history:
        cells = (
            event.at.strftime("%Y-%m-%d %H:%M:%S.%f"),
            event.event,
            event.from_status.value if event.from_status else "",
            event.to_status.value,
            event.actor,
            event.detail or "",
        )
        table.add_row(*(literal(c) for c in cells))
    console().print(table)


@jobs.command("cancel", epilog=EXIT_CODES)
@click.argument("job_id", type=int)
@server_call
def cancel(job_id: int, url: str | None, api_key: str | None, as_json: bool) -> None:
    """Cancel a waiting or pending job."""
    _done(asked(url, api_key, f"cannot cancel job {job_id}", lambda c: c.cancel(job_id)), as_json)


@jobs.command("retry", epilog=EXIT_CODES)
@click.argument("job_id", type=int)
@server_call
def retry(job_id: int, url: str | None, api_key: str | None, as_json: bool) -> None:
    """Run a failed or cancelled job again (admin)."""
    _done(asked(url, api_key, f"cannot retry job {job_id}", lambda c: c.retry(job_id)), as_json)


def _done(job: Job, as_json: bool) -> None:
    if as_json:
        print_json(job)
    else:
        click.echo(one_line(f"job {job.id} {job.status.value}"))
