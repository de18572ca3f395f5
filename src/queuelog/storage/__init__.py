"""Storage backends behind one protocol (see protocol.py)."""

from __future__ import annotations

from queuelog.config import Settings
from queuelog.storage.protocol import Storage


def open_storage(settings: Settings) -> Storage:
    """Open the backend that ``settings.database`` names."""
    url = settings.database
    if url.startswith("sqlite:///"):
        from queuelog.storage.sqlite.store import SqliteStorage

        path = settings.sqlite_path
        assert path is not None
        return SqliteStorage(path, durability=settings.durability)
    if url.startswith(("postgresql://", "postgres://")):
        from queuelog.storage.postgres.store import PostgresStorage

        return PostgresStorage(
            url,
            durability=settings.durability,
            connection_wait=settings.connection_wait_seconds,
        )
    raise ValueError("database must be a sqlite:/// or postgresql:// URL")
