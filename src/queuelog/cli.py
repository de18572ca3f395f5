"""The ``queuelog`` command: serve, migrate, keys; worker, enqueue, jobs and schedules
(``cli_client``, ``cli_jobs``, ``cli_schedules``)."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import click

from queuelog.auth import KEY_NAME, KEY_NAME_CHARS, KeyRing
from queuelog.cli_client import EXIT_CODES, enqueue, one_line, worker
from queuelog.cli_jobs import jobs
from queuelog.cli_schedules import schedules
from queuelog.cli_types import types
from queuelog.clock import SystemClock, rfc3339
from queuelog.config import PRIORITY_LABELS, Settings, load_settings
from queuelog.errors import QueueError, ValidationFailed
from queuelog.models import Priority, Role
from queuelog.scheduler import ScheduleIntake
from queuelog.storage import open_storage
from queuelog.storage.protocol import Storage

config_option = click.option(
    "--config",
    "config_path",
    type=click.Path(exists=True, dir_okay=False),
    envvar="QUEUELOG_CONFIG",
    help="TOML config file (default: $QUEUELOG_CONFIG).",
)


def _settings(config_path: str | None) -> Settings:
    try:
        return load_settings(config_path)
    except (OSError, ValueError) as exc:  # a ConfigError names the setting in one line
        raise click.ClickException(f"cannot load the configuration: {exc}") from exc


def _open(settings: Settings) -> Storage:
    try:
        return open_storage(settings)
    except Exception as exc:
        raise click.ClickException(f"cannot open the database: {exc}") from exc


@click.group(epilog=EXIT_CODES)
@click.version_option(package_name="queuelog")
def main() -> None:
    """queuelog: a durable background job queue served over HTTP."""


main.add_command(worker)
main.add_command(enqueue)
main.add_command(jobs)
main.add_command(schedules)
main.add_command(types)


@main.command()
@config_option
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8000, show_default=True, type=int)
@click.option(
    "--access-log/--no-access-log",
    default=False,
    show_default=True,
    help="Log every request (costs throughput: one log line per job step).",
)
def serve(config_path: str | None, host: str, port: int, access_log: bool) -> None:
    """Start the HTTP server (migrates the database first)."""
    from queuelog.api.app import create_app
    from queuelog.api.server import run

    settings = _settings(config_path)
    try:
        ScheduleIntake(settings).config_schedules(SystemClock().now())
    except QueueError as exc:
        raise click.ClickException(f"cannot load the configuration: {exc.detail}") from exc
    storage = _open(settings)
    plaintext = asyncio.run(KeyRing(storage, SystemClock()).bootstrap_admin())
    if plaintext is not None:
        click.echo("No active admin key was found; created one. It is shown only this once:")
        click.echo(plaintext)
    app = create_app(settings, storage=storage)
    click.echo(f"queuelog serving on http://{host}:{port} (database: {_redact(settings)})")
    run(app, host, port, access_log=access_log)


def _redact(settings: Settings) -> str:
    from queuelog.sanitize import sanitize_error

    if settings.sqlite_path is not None:
        return settings.database
    return sanitize_error(settings.database)


@main.command()
@config_option
def migrate(config_path: str | None) -> None:
    """Apply the database migrations that have not been applied yet."""
    storage = _open(_settings(config_path))
    storage.close()
    click.echo("migrations applied")


@main.group()
def keys() -> None:
    """Create, list and revoke API keys (opens the database directly)."""


@keys.command("create")
@config_option
@click.option("--name", required=True, help="The principal: producer or worker identity.")
@click.option(
    "--role",
    "roles",
    multiple=True,
    required=True,
    type=click.Choice([r.value for r in Role]),
    help="Repeat for several roles.",
)
@click.option("--max-priority", type=click.Choice(PRIORITY_LABELS), default="medium")
@click.option("--type", "types", multiple=True, help="Job types this key may use (default all).")
def keys_create(
    config_path: str | None,
    name: str,
    roles: tuple[str, ...],
    max_priority: str,
    types: tuple[str, ...],
) -> None:
    """Create a key; the plaintext is printed alone on the last line, once."""
    if not KEY_NAME.fullmatch(name):
        raise click.BadParameter(f"1-64 of {KEY_NAME_CHARS}", param_hint="--name")
    settings = _settings(config_path)
    unknown = [t for t in types if settings.job_type(t) is None]
    if unknown:
        raise click.ClickException(f"job type not configured: {', '.join(unknown)}")
    storage = _open(settings)
    try:
        ring = KeyRing(storage, SystemClock())
        key, plaintext = asyncio.run(
            ring.create(
                name,
                frozenset(Role(r) for r in roles),
                Priority.from_label(max_priority),
                types or None,
            )
        )
    except ValidationFailed as exc:
        raise click.BadParameter(exc.detail, param_hint="--name") from exc
    finally:
        storage.close()
    click.echo(f"created key {key.id} for {key.name} ({', '.join(sorted(roles))})")
    click.echo(plaintext)


@keys.command("list")
@config_option
def keys_list(config_path: str | None) -> None:
    """List keys (never their secrets)."""
    storage = _open(_settings(config_path))
    try:
        rows = asyncio.run(KeyRing(storage, SystemClock()).list())
    finally:
        storage.close()
    for key in rows:
        fields: list[Any] = [
            key.id,
            key.name,
            ",".join(sorted(r.value for r in key.roles)),
            key.max_priority.label,
            ",".join(key.types) if key.types else "*",
            key.prefix + "...",
            "revoked " + rfc3339(key.revoked_at) if key.revoked_at else "active",
        ]
        click.echo("\t".join(one_line(str(f)) for f in fields))


@keys.command("revoke")
@config_option
@click.argument("key_id", type=int)
def keys_revoke(config_path: str | None, key_id: int) -> None:
    """Revoke a key by id; it stops working at once."""
    from queuelog.errors import NotFound

    storage = _open(_settings(config_path))
    try:
        asyncio.run(KeyRing(storage, SystemClock()).revoke(key_id))
    except NotFound as exc:
        raise click.ClickException(f"no active key with id {key_id}") from exc
    finally:
        storage.close()
    click.echo(f"revoked key {key_id}")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
