"""PostgreSQL's errors that are faults of the storage, not of a request, as domain errors.

An operation refused for one of these is answered 503 `unavailable` (507
`insufficient-storage` for lack of space) instead of an internal error: the
request was sound, and may succeed once the fault is over.
"""

from __future__ import annotations

import psycopg
from psycopg import errors as pg_errors
from psycopg_pool import PoolTimeout

from queuelog.errors import StorageFull, StorageUnavailable
from queuelog.storage.postgres.connections import AllLent


def storage_fault(exc: BaseException, wait_seconds: float) -> StorageUnavailable | None:
    """The domain error for a storage fault, or None for any other failure.
    ``wait_seconds`` is how long a request waited for a connection."""
    if isinstance(exc, StorageUnavailable):
        return exc
    if isinstance(exc, AllLent):
        detail = f"Every database connection of this node stayed in use for {wait_seconds:g} s"
        return StorageUnavailable(detail, reason="busy")
    if isinstance(exc, PoolTimeout):
        detail = f"No database connection could be had within {wait_seconds:g} s"
        return StorageUnavailable(detail, reason="unreachable")
    if isinstance(exc, pg_errors.DiskFull):
        return StorageFull("No space is left for the database")
    if isinstance(exc, pg_errors.ReadOnlySqlTransaction):  # a standby, or a read-only server
        return StorageUnavailable("The database cannot be written", reason="read-only")
    if isinstance(exc, pg_errors.IoError | pg_errors.SystemError):
        return StorageUnavailable("The database could not read or write", reason="io-error")
    if isinstance(exc, pg_errors.LockNotAvailable):
        return StorageUnavailable("The database is locked", reason="locked")
    if isinstance(exc, pg_errors.QueryCanceled):  # its statement_timeout, or an operator
        return StorageUnavailable("The database canceled the statement", reason="canceled")
    if isinstance(exc, psycopg.OperationalError):  # the connection broke, or was refused
        return StorageUnavailable("The database cannot be reached", reason="unreachable")
    return None
