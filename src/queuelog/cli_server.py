"""The commands of the server extra: ``serve``, ``migrate`` and ``keys``.

Defined with the client commands, so ``queuelog --help`` lists them in every install,
but the server's modules are imported only inside them, once ``require`` has found
the extra: without it, a command says in one line which extra to install (exit 2).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

import click
from click.core import ParameterSource

from queuelog.cli_output import one_line
from queuelog.extras import installed
from queuelog.models import MAX_ID, PRIORITY_LABELS, Priority, Role

if TYPE_CHECKING:
    from queuelog.config import Settings
    from queuelog.storage.protocol import Storage

T = TypeVar("T")


class MissingExtra(click.ClickException):
    """A command needs a part of the package that is not installed."""

    exit_code = 2


def require(extra: str, what: str) -> None:
    """Stop the command (exit 2) unless ``extra`` is installed."""
    if not installed(extra):
        wanted = extra if extra == "server" else f"server,{extra}"
        raise MissingExtra(
            f"{what} needs the {extra} extra: pip install 'queuelog[{wanted}]'"
            f" (from a checkout: pip install '.[{wanted}]')"
        )


def _existing_file(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """The config file's path, or a usage error naming where it came from: the option,
    or ``$QUEUELOG_CONFIG`` when that set it."""
    if value is None or os.path.isfile(value):
        return value
    from_env = ctx.get_parameter_source("config_path") is ParameterSource.ENVIRONMENT
    hint = "QUEUELOG_CONFIG" if from_env else "'--config'"
    raise click.BadParameter(f"no file {value!r}", param_hint=hint)


config_option = click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    envvar="QUEUELOG_CONFIG",
    callback=_existing_file,
    help="TOML config file (default: $QUEUELOG_CONFIG).",
)


def _settings(config_path: str | None) -> Settings:
    from queuelog.config import load_settings

    try:
        return load_settings(config_path)
    except (OSError, ValueError) as exc:  # a ConfigError names the setting in one line
        raise click.ClickException(f"cannot load the configuration: {exc}") from exc


def _open(settings: Settings, existing: bool = False) -> Storage:
    """The configured database; with ``existing``, a SQLite file must be there already,
    a PostgreSQL schema must hold queuelog's tables: a command that only reads or revokes
    keys, run from another directory or given the wrong database, would make an empty
    one there and answer from it."""
    from queuelog.storage import open_storage

    path = settings.sqlite_path
    if existing and path is not None and not path.exists():
        raise click.ClickException(
            f"cannot open the database: no file {str(path.resolve())!r} (migrate or serve makes it)"
        )
    if path is None:  # the settings admit a SQLite file or PostgreSQL
        require("postgres", "a PostgreSQL database")
    try:
        return open_storage(settings, existing)
    except Exception as exc:
        # A database's error may quote the statement on further lines: its first says why.
        why = next(iter(str(exc).splitlines()), "") or type(exc).__name__
        raise click.ClickException(f"cannot open the database: {why}") from exc


@click.command()
@config_option
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535))
@click.option(
    "--access-log/--no-access-log",
    default=False,
    show_default=True,
    help="Log every request (costs throughput: one log line per job step).",
)
@click.option(
    "--otel/--no-otel",
    default=None,
    help="Trace every request with OpenTelemetry (default: [server] otel in the config).",
)
def serve(
    config_path: str | None, host: str, port: int, access_log: bool, otel: bool | None
) -> None:
    """Start the HTTP server (migrates the database first)."""
    require("server", "queuelog serve")
    settings = _settings(config_path)
    if otel is not None:
        server = settings.server.model_copy(update={"otel": otel})
        settings = settings.model_copy(update={"server": server})
    if settings.server.otel:
        require("otel", "queuelog serve --otel")
    listening = _listening(host, port)
    storage = _open(_checked(settings))
    _bootstrap_admin(storage)
    from queuelog.api.app import create_app
    from queuelog.api.server import run

    app = create_app(settings, storage=storage)
    durability = asyncio.run(storage.durability())  # as the database says, not the config
    database = f"database: {_redact(settings)}, durability: {durability}"
    port = listening.getsockname()[1]  # the one the system chose, for --port 0
    shown = f"[{host}]" if ":" in host else host  # a URL brackets an IPv6 address
    click.echo(f"queuelog serving on http://{shown}:{port} ({database})")
    run(app, listening, access_log=access_log)


class CannotListen(click.ClickException):
    """The address to serve on cannot be bound (taken, or not this host's)."""

    exit_code = 3


def _listening(host: str, port: int) -> socket.socket:
    """The server's socket, bound before anything else is done: on a port that is taken
    the command fails at once, before it migrates or shows a new admin key."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        raise CannotListen(f"cannot listen on {host}:{port}: {exc}") from None
    try:
        # As uvicorn binds: a restart may take the port back from connections closing.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise CannotListen(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    return sock


def _checked(settings: Settings) -> Settings:
    """``settings``, once its schedules are known to fire."""
    from queuelog.clock import SystemClock
    from queuelog.errors import QueueError
    from queuelog.scheduler import ScheduleIntake

    try:
        ScheduleIntake(settings).config_schedules(SystemClock().now())
    except QueueError as exc:
        raise click.ClickException(f"cannot load the configuration: {exc.detail}") from exc
    return settings


def _stored(what: str, work: Coroutine[Any, Any, T]) -> T:
    """Run ``work`` on the database; a storage fault (a database that cannot be written,
    is full, or stays locked) is one line saying what could not be done, no traceback."""
    from queuelog.errors import StorageUnavailable

    try:
        return asyncio.run(work)
    except StorageUnavailable as exc:
        raise click.ClickException(f"cannot {what}: {exc.detail}") from None


def _bootstrap_admin(storage: Storage) -> None:
    from queuelog.auth import KeyRing
    from queuelog.clock import SystemClock

    ring = KeyRing(storage, SystemClock())
    plaintext = _stored("make the first admin key", ring.bootstrap_admin())
    if plaintext is not None:
        click.echo("No active admin key was found; created one. It is shown only this once:")
        click.echo(plaintext)


def _redact(settings: Settings) -> str:
    from queuelog.sanitize import sanitize_error

    if settings.sqlite_path is not None:
        return settings.database
    return sanitize_error(settings.database)


@click.command()
@config_option
def migrate(config_path: str | None) -> None:
    """Apply the database migrations that have not been applied yet."""
    require("server", "queuelog migrate")
    storage = _open(_checked(_settings(config_path)))
    storage.close()
    click.echo("migrations applied")


@click.group()
def keys() -> None:
    """Create, list and revoke API keys (opens the database directly)."""
    require("server", "queuelog keys")
    # The store logs a storage fault for a server's operator ("refused until a write
    # stores again"); a command that meets one says so itself, in its one line.
    store_log = logging.getLogger("queuelog.storage")
    if not any(isinstance(handler, logging.NullHandler) for handler in store_log.handlers):
        store_log.addHandler(logging.NullHandler())


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
@click.option(
    "--max-priority",
    type=click.Choice(PRIORITY_LABELS, case_sensitive=False),
    default="medium",
    show_default=True,
)
@click.option("--type", "types", multiple=True, help="Job types this key may use (default all).")
def keys_create(
    config_path: str | None,
    name: str,
    roles: tuple[str, ...],
    max_priority: str,
    types: tuple[str, ...],
) -> None:
    """Create a key; the plaintext is printed alone on the last line, once."""
    from queuelog.auth import KEY_NAME, KEY_NAME_CHARS, KeyRing
    from queuelog.clock import SystemClock
    from queuelog.errors import ValidationFailed

    if not KEY_NAME.fullmatch(name):
        raise click.BadParameter(f"1-64 of {KEY_NAME_CHARS}", param_hint="--name")
    settings = _settings(config_path)
    unknown = [t for t in types if settings.job_type(t) is None]
    if unknown:
        raise click.ClickException(f"job type not configured: {', '.join(unknown)}")
    storage = _open(settings)
    try:
        ring = KeyRing(storage, SystemClock())
        key, plaintext = _stored(
            "create the key",
            ring.create(
                name,
                frozenset(Role(r) for r in roles),
                Priority.from_label(max_priority),
                types or None,
            ),
        )
    except ValidationFailed as exc:
        raise click.BadParameter(exc.detail, param_hint="--name") from exc
    finally:
        storage.close()
    click.echo(
        f"created key {key.id} for {key.name} ({', '.join(sorted(r.value for r in key.roles))})"
    )
    click.echo(plaintext)


@keys.command("list")
@config_option
@click.option("--json", "as_json", is_flag=True, help="Print the keys as GET /keys answers.")
def keys_list(config_path: str | None, as_json: bool) -> None:
    """List keys (never their secrets)."""
    from queuelog.auth import KeyRing, key_json
    from queuelog.clock import SystemClock, rfc3339

    storage = _open(_settings(config_path), existing=True)
    try:
        rows = _stored("list the keys", KeyRing(storage, SystemClock()).list())
    finally:
        storage.close()
    if as_json:
        click.echo(json.dumps({"keys": [key_json(key) for key in rows]}, indent=2))
        return
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
@click.argument("key_id", type=click.IntRange(1, MAX_ID))
def keys_revoke(config_path: str | None, key_id: int) -> None:
    """Revoke a key by id; running servers refuse it within a second (a revoke through
    the API counts at once on the node that takes it)."""
    from queuelog.auth import KeyRing
    from queuelog.clock import SystemClock
    from queuelog.errors import NotFound

    storage = _open(_settings(config_path), existing=True)
    try:
        _stored(f"revoke key {key_id}", KeyRing(storage, SystemClock()).revoke(key_id))
    except NotFound as exc:
        raise click.ClickException(f"no active key with id {key_id}") from exc
    finally:
        storage.close()
    click.echo(f"revoked key {key_id}")
