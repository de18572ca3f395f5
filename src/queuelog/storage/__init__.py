"""Storage backends behind one protocol (see protocol.py)."""

from __future__ import annotations

from queuelog.config import Settings
from queuelog.storage.protocol import Storage


def open_storage(settings: Settings, existing: bool = False) -> Storage:
    """Open the backend that ``settings.database`` names (a SQLite file, else PostgreSQL:
    the settings admit no other URL); with ``existing``, a PostgreSQL database only if
    queuelog made its tables there (the caller looks for a SQLite file itself)."""
    path = settings.sqlite_path
    if path is not None:
        from queuelog.storage.sqlite.store import SqliteStorage

        return SqliteStorage(path, durability=settings.durability)
    from queuelog.storage.postgres.store import PostgresStorage

    return PostgresStorage(
        settings.database,
        durability=settings.durability,
        connection_wait=settings.connection_wait_seconds,
        existing=existing,
    )
