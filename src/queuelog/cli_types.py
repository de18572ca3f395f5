"""``queuelog types``: the job types of a running server, their limits and pauses (admin)."""

from __future__ import annotations

import click
from rich.table import Table

from queuelog.cli_client import (
    EXIT_CODES,
    asked,
    console,
    print_json,
    server_call,
)
from queuelog.cli_output import literal, one_line
from queuelog.client import JobType


@click.group(epilog=EXIT_CODES)
def types() -> None:
    """List job types with their limits; pause or resume one (admin)."""


def _limit(value: int | None) -> str:
    return "-" if value is None else str(value)


def _rate(job_type: JobType) -> str:
    rate = job_type.rate_limit
    return "-" if rate is None else f"{rate['jobs']}/{rate['per_seconds']:g}s"


@types.command("list", epilog=EXIT_CODES)
@server_call
def list_types(url: str | None, api_key: str | None, as_json: bool) -> None:
    """Every configured type: running now against its limit, rate limit, pause, counts."""
    found = asked(url, api_key, "cannot list job types", lambda c: c.list_types())
    if as_json:
        print_json(found)
        return
    table = Table(
        "type", "running", "group limit", "rate limit", "pending", "waiting", "failed", "paused"
    )
    for t in found:
        running = f"{t.counts.get('running', 0)}/{_limit(t.concurrency)}"
        paused = f"yes, by {t.paused_by}" if t.paused else "no"
        cells = (
            t.name,
            running,
            _limit(t.group_concurrency),
            _rate(t),
            t.counts.get("pending", 0),
            t.counts.get("waiting", 0),
            t.counts.get("failed", 0),
            paused,
        )
        table.add_row(*(literal(c) for c in cells))
    console().print(table)


def _set_paused(
    name: str, paused: bool, url: str | None, api_key: str | None, as_json: bool
) -> None:
    verb = "pause" if paused else "resume"
    job_type = asked(
        url,
        api_key,
        f"cannot {verb} {name}",
        lambda c: c.pause_type(name) if paused else c.resume_type(name),
    )
    if as_json:
        print_json(job_type)
    else:
        state = "paused" if job_type.paused else "resumed"
        click.echo(one_line(f"type {job_type.name} {state}"))


@types.command("pause", epilog=EXIT_CODES)
@click.argument("name", metavar="TYPE")
@server_call
def pause(name: str, url: str | None, api_key: str | None, as_json: bool) -> None:
    """Stop TYPE's jobs from being claimed, on every node, until it is resumed."""
    _set_paused(name, True, url, api_key, as_json)


@types.command("resume", epilog=EXIT_CODES)
@click.argument("name", metavar="TYPE")
@server_call
def resume(name: str, url: str | None, api_key: str | None, as_json: bool) -> None:
    """Let TYPE's jobs be claimed again."""
    _set_paused(name, False, url, api_key, as_json)
