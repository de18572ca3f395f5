"""SQLite's errors that are faults of the storage, not of a request, as domain errors.

An operation refused for one of these is answered 503 `unavailable` (507
`insufficient-storage` for lack of space) instead of an internal error: the
request was sound, and may succeed once the fault is over.
"""

from __future__ import annotations

import sqlite3

from queuelog.errors import StorageFull, StorageUnavailable

# SQLite's primary result codes (the low byte of an extended code) and what they mean here.
_FAULTS: dict[int, tuple[str, str]] = {
    sqlite3.SQLITE_IOERR: ("io-error", "The database file could not be read or written"),
    sqlite3.SQLITE_READONLY: ("read-only", "The database cannot be written"),
    sqlite3.SQLITE_CANTOPEN: ("io-error", "The database file could not be opened"),
    sqlite3.SQLITE_BUSY: ("locked", "The database is locked by another program"),
    sqlite3.SQLITE_LOCKED: ("locked", "The database is locked by another program"),
    sqlite3.SQLITE_PROTOCOL: ("locked", "The database is locked by another program"),
}


def storage_fault(exc: BaseException) -> StorageUnavailable | None:
    """The domain error for a storage fault, or None for any other failure."""
    if isinstance(exc, StorageUnavailable):
        return exc
    code = getattr(exc, "sqlite_errorcode", None)
    if not isinstance(exc, sqlite3.Error) or code is None:
        return None
    if code & 0xFF == sqlite3.SQLITE_FULL:
        return StorageFull("No space is left for the database")
    found = _FAULTS.get(code & 0xFF)
    if found is None:
        return None
    reason, detail = found
    return StorageUnavailable(detail, reason=reason)


def locked() -> StorageUnavailable:
    """The error for a write lock held by another process past the busy timeout."""
    return StorageUnavailable(_FAULTS[sqlite3.SQLITE_BUSY][1], reason="locked")
