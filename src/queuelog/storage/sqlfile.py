"""Named SQL queries and numbered migrations, read from a backend's folder."""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from importlib import resources

_NAME = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)


def load_queries(package: str, filename: str = "queries.sql") -> dict[str, str]:
    """Split a ``queries.sql`` into ``{name: sql}`` at each ``-- name: x`` line."""
    text = resources.files(package).joinpath(filename).read_text(encoding="utf-8")
    parts = _NAME.split(text)
    queries: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in queries:
            raise ValueError(f"query {name!r} defined twice in {package}/{filename}")
        queries[name] = body.strip().rstrip(";")
    return queries


def load_migrations(package: str) -> list[tuple[int, str]]:
    """``[(number, sql)]`` of ``migrations/NNNN_name.sql``, in order."""
    folder = resources.files(package).joinpath("migrations")
    found = []
    for entry in folder.iterdir():
        match = re.match(r"^(\d{4})_\w+\.sql$", entry.name)
        if match:
            found.append((int(match.group(1)), entry.read_text(encoding="utf-8")))
    return sorted(found)


def refuse_newer(done: Collection[int], migrations: Sequence[tuple[int, str]]) -> None:
    """ValueError when the database holds a migration this version does not know: a
    newer version made it, and this one could misread its tables or undo its rules
    (an older pruner, say, deletes jobs without what a newer one keeps beside them)."""
    newest = max(done, default=0)
    known = max((version for version, _ in migrations), default=0)
    if newest > known:
        raise ValueError(
            f"the database was migrated by a newer queuelog (migration {newest:04d}; this "
            f"one knows up to {known:04d}): run that version, or a newer one"
        )
