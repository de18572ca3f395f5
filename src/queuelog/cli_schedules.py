"""``queuelog schedules``: list, create, pause, resume, trigger and delete recurring jobs
on a running server (admin)."""

from __future__ import annotations

from datetime import datetime

import click
from rich.table import Table

from queuelog.cli_client import (
    EXIT_CODES,
    asked,
    console,
    key_option,
    payload_argument,
    print_json,
    server_call,
    url_option,
)
from queuelog.cli_output import literal, one_line, reported
from queuelog.client import Client, Schedule
from queuelog.models import PRIORITY_LABELS


@click.group(epilog=EXIT_CODES)
def schedules() -> None:
    """Recurring jobs: list, create, pause, resume, trigger, delete (admin)."""


def _when(at: datetime | None) -> str:
    return at.strftime("%Y-%m-%d %H:%M:%S") if at else ""


def _cadence(schedule: Schedule) -> str:
    if schedule.cron is not None:
        return f"{schedule.cron} ({schedule.timezone})"
    return f"every {schedule.every_seconds} s"


def _print(found: list[Schedule]) -> None:
    table = Table("name", "cadence", "type", "state", "next run (UTC)", "last run", "last job")
    for s in found:
        state = "paused" if s.paused else "active"
        cells = (
            s.name,
            _cadence(s),
            s.type,
            f"{state}, {s.source}",
            _when(s.next_run_at),
            _when(s.last_run_at),
            str(s.last_job_id or ""),
        )
        table.add_row(*(literal(c) for c in cells))
    console().print(table)


@schedules.command("list", epilog=EXIT_CODES)
@server_call
def list_schedules(url: str | None, api_key: str | None, as_json: bool) -> None:
    """Every schedule, by name."""
    found = asked(url, api_key, "cannot list schedules", lambda c: c.list_schedules())
    if as_json:
        print_json(found)
    else:
        _print(found)


@schedules.command("create", epilog=EXIT_CODES)
@click.argument("name")
@click.argument("job_type", metavar="TYPE")
@click.argument("payload", metavar="[PAYLOAD_JSON]", required=False)
@click.option("--cron", help="Five fields: minute hour day month weekday.")
@click.option("--every-seconds", type=int, help="Instead of --cron: a fixed interval.")
@click.option("--timezone", help="IANA name the cron is read in (default UTC).")
@click.option("--priority", type=click.Choice(PRIORITY_LABELS, case_sensitive=False))
@click.option(
    "--overlap/--no-overlap",
    default=None,
    help="Fire while the last job is still pending or running (default: overlap).",
)
@server_call
def create(
    name: str,
    job_type: str,
    payload: str | None,
    cron: str | None,
    every_seconds: int | None,
    timezone: str | None,
    priority: str | None,
    overlap: bool | None,
    url: str | None,
    api_key: str | None,
    as_json: bool,
) -> None:
    """Create a schedule NAME that makes jobs of TYPE, by --cron or --every-seconds."""
    if (cron is None) == (every_seconds is None):
        raise click.UsageError("give either --cron or --every-seconds")
    body = payload_argument(payload)
    with Client(url, api_key) as client, reported(f"cannot create schedule {name}"):
        made = client.create_schedule(
            name,
            job_type,
            cron=cron,
            every_seconds=every_seconds,
            timezone=timezone,
            payload=body,
            priority=priority,
            overlap=overlap,
        )
    _done(made, as_json)


def _done(schedule: Schedule, as_json: bool) -> None:
    if as_json:
        print_json(schedule)
        return
    if schedule.paused:  # it has no next run until resumed
        line = f"schedule {schedule.name} paused"
    else:
        line = f"schedule {schedule.name} active, next run {_when(schedule.next_run_at)} UTC"
    click.echo(one_line(line))


@schedules.command("pause", epilog=EXIT_CODES)
@click.argument("name")
@server_call
def pause(name: str, url: str | None, api_key: str | None, as_json: bool) -> None:
    """Pause a schedule: it makes no job until resumed."""
    made = asked(url, api_key, f"cannot pause schedule {name}", lambda c: c.pause_schedule(name))
    _done(made, as_json)


@schedules.command("resume", epilog=EXIT_CODES)
@click.argument("name")
@server_call
def resume(name: str, url: str | None, api_key: str | None, as_json: bool) -> None:
    """Resume a schedule from its next fire time."""
    made = asked(url, api_key, f"cannot resume schedule {name}", lambda c: c.resume_schedule(name))
    _done(made, as_json)


@schedules.command("trigger", epilog=EXIT_CODES)
@click.argument("name")
@server_call
def trigger(name: str, url: str | None, api_key: str | None, as_json: bool) -> None:
    """Make the schedule's job now."""
    job = asked(url, api_key, f"cannot trigger schedule {name}", lambda c: c.trigger_schedule(name))
    if as_json:
        print_json(job)
    else:
        click.echo(one_line(f"job {job.id} {job.status.value} ({job.type}, schedule {name})"))


@schedules.command("delete", epilog=EXIT_CODES)
@click.argument("name")
@url_option
@key_option
def delete(name: str, url: str | None, api_key: str | None) -> None:
    """Delete a schedule made through the API (its jobs are kept)."""
    asked(url, api_key, f"cannot delete schedule {name}", lambda c: c.delete_schedule(name))
    click.echo(one_line(f"schedule {name} deleted"))
