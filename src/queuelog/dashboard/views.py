"""Presentation helpers: times, JSON and the throughput chart's geometry. No I/O."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from markupsafe import Markup

from queuelog.models import JobStatus, MinuteCounts
from queuelog.plain_json import HIDDEN_CHARACTERS, json_escape

STATUSES = [s.value for s in JobStatus]


def when(at: datetime | None) -> str:
    return "" if at is None else at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def path_segment(name: str) -> str:
    """``name`` as one segment of a path, its slashes too: Jinja's ``urlencode`` keeps
    them, and a browser resolves ``..`` between real slashes before sending."""
    return quote(name, safe="")


def duration(seconds: float | None) -> str:
    """``3 h 2 min``, ``4 min 5 s``, ``12 s``; negative means in the past."""
    if seconds is None:
        return "-"
    whole = int(abs(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes} min"
    if minutes:
        return f"{minutes} min {secs} s"
    return f"{secs} s"


# Indenting multiplies the size of deep or wide JSON (a 60 KB payload can print as
# megabytes): a page shows this much of it.
PRETTY_CHARS = 64 * 1024
CUT_NOTE = "\n… cut here: only the first 64 KiB of the indented JSON are shown."
_PRETTY = json.JSONEncoder(indent=2, sort_keys=True, ensure_ascii=False)


_HIDDEN = re.compile(f"[{HIDDEN_CHARACTERS}]")


def visible(value: Any) -> Any:
    """What a page writes of ``value`` (every ``{{ }}``, JSON included): text with the
    characters a reader would not see written as their escapes (``\\u202e``), so that
    none reorders or hides what a page shows, stored or reflected from a link alike;
    JSON stays the same JSON. Markup (a macro's) is made of such values already."""
    if isinstance(value, Markup) or not isinstance(value, str):
        return value
    return _HIDDEN.sub(lambda found: json_escape(found[0]), value)


def pretty_json(value: Any) -> str:
    """Indented JSON, at most ``PRETTY_CHARS`` of it, then a note that it was cut.

    The indenting encoder writes its text piece by piece, so what is not shown is
    never built.
    """
    parts: list[str] = []
    size = 0
    for part in _PRETTY.iterencode(value):
        parts.append(part)
        size += len(part)
        if size > PRETTY_CHARS:
            return "".join(parts)[:PRETTY_CHARS] + CUT_NOTE
    return "".join(parts)


# A table cell shows this much of a job's progress; the job's page shows all of it.
PROGRESS_CELL_CHARS = 120
_COMPACT = json.JSONEncoder(sort_keys=True, ensure_ascii=False, separators=(", ", ": "))


def progress_cell(value: Any) -> str:
    """A job's progress on one line for a table cell (cut, with an ellipsis); '' for none."""
    if value is None:
        return ""
    text = _COMPACT.encode(value)
    return text if len(text) <= PROGRESS_CELL_CHARS else text[: PROGRESS_CELL_CHARS - 1] + "…"


@dataclass(frozen=True, slots=True)
class Bar:
    x: float
    width: float
    completed_y: float
    completed_height: float
    failed_y: float
    failed_height: float
    title: str


@dataclass(frozen=True, slots=True)
class Chart:
    width: int
    height: int
    peak: int
    bars: list[Bar]
    total_completed: int
    total_failed: int
    first_label: str
    last_label: str


def throughput_chart(slots: Sequence[MinuteCounts], width: int = 720, height: int = 140) -> Chart:
    """Stacked bars per minute (completed below, failed above), scaled to the busiest."""
    peak = max([s.completed + s.failed for s in slots] + [1])
    step = width / max(len(slots), 1)
    bars = []
    for index, slot in enumerate(slots):
        done_h = height * slot.completed / peak
        fail_h = height * slot.failed / peak
        label = slot.start.astimezone(UTC).strftime("%H:%M")
        bars.append(
            Bar(
                x=round(index * step + 1, 2),
                width=round(max(step - 2, 1), 2),
                completed_y=round(height - done_h, 2),
                completed_height=round(done_h, 2),
                failed_y=round(height - done_h - fail_h, 2),
                failed_height=round(fail_h, 2),
                title=f"{label}: {slot.completed} completed, {slot.failed} failed",
            )
        )
    return Chart(
        width=width,
        height=height,
        peak=peak,
        bars=bars,
        total_completed=sum(s.completed for s in slots),
        total_failed=sum(s.failed for s in slots),
        first_label=slots[0].start.astimezone(UTC).strftime("%H:%M") if slots else "",
        last_label=slots[-1].start.astimezone(UTC).strftime("%H:%M") if slots else "",
    )


def status_totals(counts: dict[tuple[str, str], int]) -> dict[str, int]:
    totals = dict.fromkeys(STATUSES, 0)
    for (status, _), count in counts.items():
        totals[status] = totals.get(status, 0) + count
    return totals


def by_type(counts: dict[tuple[str, str], int]) -> dict[str, dict[str, int]]:
    """``{type: {status: count}}`` with every status present, types sorted."""
    table: dict[str, dict[str, int]] = {}
    for (status, job_type), count in sorted(counts.items(), key=lambda item: item[0][1]):
        table.setdefault(job_type, dict.fromkeys(STATUSES, 0))[status] = count
    return table
