"""``enqueue --from-file``: a JSON-lines file read, cut into batches and enqueued, with
the line the server refused named."""

from __future__ import annotations

import json
from typing import Any, TextIO

import click
from rich.console import Console
from rich.progress import Progress

from queuelog.cli_output import refusal
from queuelog.client import Client
from queuelog.errors import QueueError
from queuelog.models import MAX_DEPENDS_ON
from queuelog.plain_json import strict_json


def read_jobs(stream: TextIO) -> list[tuple[int, dict[str, Any]]]:
    """One enqueue body per line (blank lines skipped), with its line's number."""
    jobs: list[tuple[int, dict[str, Any]]] = []
    try:
        for number, line in enumerate(stream, start=1):
            if not line.strip():
                continue
            try:
                item = strict_json(line)
            except ValueError as exc:
                raise click.BadParameter(f"line {number} is not JSON: {exc}") from exc
            if not isinstance(item, dict) or "type" not in item:
                raise click.BadParameter(f"line {number} is not an object with a 'type'")
            _check_items(number, item, len(jobs))
            jobs.append((number, item))
    except UnicodeDecodeError as exc:
        raise click.BadParameter(f"the input is not UTF-8 text: {exc.reason}") from exc
    return jobs


def _indices(job: dict[str, Any]) -> list[int] | None:
    """The earlier jobs a line's ``depends_on_items`` names, by their place among the
    file's jobs (from 0); None when it names none, or not as a list of whole numbers
    (sent as it is: the server says why it refuses it)."""
    named = job.get("depends_on_items")
    if not isinstance(named, list) or not named:
        return None
    whole = [int(i) if isinstance(i, float) and i.is_integer() else i for i in named]
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in whole):
        return None
    return whole


def _check_items(number: int, job: dict[str, Any], index: int) -> None:
    """A line may wait only for the jobs of the lines before it: else bad usage, before
    anything is sent (refused by the server, it would leave the batches before it made)."""
    named = _indices(job) or []
    late = [i for i in named if not 0 <= i < index]
    if late:
        raise click.BadParameter(
            f"line {number}: depends_on_items names job {late[0]} of the file, where only "
            f"the jobs before this line's (job {index}, counted from 0) may be named"
        )
    twice = sorted(i for i in set(named) if named.count(i) > 1)
    if twice:
        raise click.BadParameter(f"line {number}: depends_on_items names job {twice[0]} twice")


def in_batch(job: dict[str, Any], start: int, made: list[int]) -> dict[str, Any]:
    """``job`` as an item of the batch that begins with the file's job ``start``. Its
    ``depends_on_items`` name jobs by their place in the file, whatever batch each travels
    in: a job of this batch by its place in the batch, one an earlier batch made by its id
    (``made``: the ids of the earlier batches' jobs, in order), added to ``depends_on``."""
    named = _indices(job)
    given = job.get("depends_on")
    given = [] if given is None else given  # null is none, as the server reads it
    if named is None or not start or not isinstance(given, list):
        return job
    sent = {key: value for key, value in job.items() if key != "depends_on_items"}
    here = [i - start for i in named if i >= start]
    if here:
        sent["depends_on_items"] = here
    earlier = [made[i] for i in named if i < start]
    if earlier:
        # A job named by id and by index is named once, as the server takes it in a batch.
        sent["depends_on"] = [*given, *(i for i in earlier if i not in given)]
    return sent


def _check_by_id(numbers: list[int], cut: list[list[dict[str, Any]]]) -> None:
    """A line's jobs of earlier batches go by id, in ``depends_on``, which names at most
    MAX_DEPENDS_ON: a line that would name more is bad usage before anything is sent
    (refused by the server, it would leave the batches before it made)."""
    start = 0
    for batch in cut:
        for offset, job in enumerate(batch):
            earlier = {i for i in _indices(job) or () if i < start}
            given = job.get("depends_on")
            count = len(earlier) + (len(given) if isinstance(given, list) else 0)
            if count > MAX_DEPENDS_ON:
                hint = "; a larger --batch-size sends more of them in its batch" if earlier else ""
                raise click.BadParameter(
                    f"line {numbers[start + offset]}: waits for {count} jobs by id (its "
                    f"depends_on and the jobs of earlier batches it names), more than "
                    f"{MAX_DEPENDS_ON}{hint}"
                )
        start += len(batch)


# A batch request stays well under the server's 1 MiB limit, whatever --batch-size says.
BATCH_BYTES = 512 * 1024


def batches(jobs: list[dict[str, Any]], size: int) -> list[list[dict[str, Any]]]:
    """``jobs`` in order, cut into batches of at most ``size`` jobs and BATCH_BYTES."""
    out: list[list[dict[str, Any]]] = [[]]
    weight = 0
    for job in jobs:
        cost = len(json.dumps(job, ensure_ascii=False).encode()) + 2
        if out[-1] and (len(out[-1]) >= size or weight + cost > BATCH_BYTES):
            out.append([])
            weight = 0
        out[-1].append(job)
        weight += cost
    return [b for b in out if b]


def enqueue_file(
    client: Client, lines: list[tuple[int, dict[str, Any]]], batch_size: int
) -> tuple[int, int]:
    """Enqueue in batches with a progress bar on standard error: (created, existing)."""
    created = existing = 0
    numbers = [number for number, _ in lines]
    cut = batches([job for _, job in lines], batch_size)
    _check_by_id(numbers, cut)
    console = Console(stderr=True)
    # A bar for a person at a terminal; none in a pipe or a log, where a refusal is one line.
    with Progress(console=console, transient=False, disable=not console.is_terminal) as progress:
        task = progress.add_task("enqueueing", total=len(lines))
        start = 0
        made: list[int] = []
        for batch in cut:
            try:
                answers = client.enqueue_many([in_batch(job, start, made) for job in batch])
            except QueueError as refused:
                what = _refused_line(refused, numbers, start, len(batch))
                raise refusal(what, refused) from refused
            start += len(batch)
            made += [answer.job.id for answer in answers]
            created += sum(1 for a in answers if a.created)
            existing += sum(1 for a in answers if not a.created)
            progress.advance(task, len(batch))
    return created, existing


def _refused_line(refused: QueueError, numbers: list[int], start: int, size: int) -> str:
    """The line of the file the server refused, when it names the batch's item; else the
    batch's lines: refused, for a refusal of the whole batch (a 4xx: nothing of it was
    stored), or not known to be enqueued (the server may be down, or failed after storing
    them). The batches before were enqueued."""
    index = refused.extra.get("index")
    errors = refused.extra.get("errors")
    if index is None and isinstance(errors, list) and errors and isinstance(errors[0], dict):
        loc = errors[0].get("loc", [])
        index = loc[2] if loc[:2] == ["body", "jobs"] and len(loc) > 2 else None
    lines = _span(numbers[start], numbers[start + size - 1])
    if isinstance(index, int) and 0 <= index < size:
        what, after = f"line {numbers[start + index]} refused", ", none after"
    elif 400 <= refused.status < 500 and refused.status != 429:
        # Refused whole, nothing of it stored; a 429 may end the resends of a batch whose
        # first send was stored before its connection broke.
        what, after = f"{lines} refused", ", none after"
    else:  # the server named no item: the batch may or may not be stored
        what, after = f"{lines} not known to be enqueued", ""
    if not start:
        return f"{what}; none enqueued" if after else what
    before = numbers[start] - 1
    return f"{what}; {_span(1, before)} {'was' if before == 1 else 'were'} enqueued{after}"


def _span(first: int, last: int) -> str:
    return f"line {first}" if first == last else f"lines {first}-{last}"
