"""The ``queuelog`` command: worker, enqueue, jobs, types and schedules talk to a server
(``cli_client``, ``cli_jobs``, ``cli_types``, ``cli_schedules``); serve, migrate and keys
are the server extra's (``cli_server``). Importing this imports no server module."""

from __future__ import annotations

import sys

import click

from queuelog.cli_client import EXIT_CODES, enqueue, worker
from queuelog.cli_jobs import jobs
from queuelog.cli_schedules import schedules
from queuelog.cli_server import keys, migrate, serve
from queuelog.cli_types import types


@click.group(epilog=EXIT_CODES)
@click.version_option(package_name="queuelog")
def main() -> None:
    """queuelog: a durable background job queue served over HTTP."""


for command in (worker, enqueue, jobs, schedules, types, serve, migrate, keys):
    main.add_command(command)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
