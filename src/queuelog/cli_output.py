"""What the client commands print: a server's values, shown safely, and a failure as one
line with the exit code the commands document."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click
from rich.text import Text

from queuelog.client.errors import ServerError, ServerUnavailable
from queuelog.errors import Forbidden, QueueError, Unauthenticated
from queuelog.plain_json import HIDDEN_CHARACTERS, json_escape

_FIELDS_SHOWN = 3  # of a refusal's field errors, in the one line the CLI prints


class Refused(click.ClickException):
    """The server refused the request."""

    exit_code = 1


class AuthFailed(click.ClickException):
    """The key is missing, unknown or revoked, or lacks the role."""

    exit_code = 3


class Unreachable(click.ClickException):
    """The server could not be reached, or failed."""

    exit_code = 4


class StillRunning(click.ClickException):
    """The time to wait passed before the job finished."""

    exit_code = 5


def failure_for(error: QueueError) -> type[click.ClickException]:
    if isinstance(error, Unauthenticated | Forbidden):
        return AuthFailed
    if isinstance(error, ServerUnavailable | ServerError):
        return Unreachable
    return Refused


# What a terminal would act on rather than show: C0 controls but newline (ESC starts
# colours, cursor moves and hyperlinks), DEL, C1 controls (a lone CSI), and the format
# characters that reorder or hide text (bidirectional overrides, zero-width characters).
_CONTROL = re.compile(f"[\x00-\x09\x0b-\x1f{HIDDEN_CHARACTERS}]")


def shown(value: object) -> str:
    """A value from the server as text safe to print: control characters removed."""
    return _CONTROL.sub("", str(value))


def shown_json(value: Any) -> str:
    """``value`` as JSON text safe to print and still the same data: what ``shown``
    would remove is written as a JSON escape (only a string can hold it)."""
    text = json.dumps(value, ensure_ascii=False)
    return _CONTROL.sub(lambda found: json_escape(found[0]), text)


def one_line(text: str) -> str:
    """``shown`` on one line: for messages and the lines the commands print."""
    return shown(text).replace("\n", " ")


def literal(value: object) -> Text:
    """A table cell from a server value: shown as it is, never read as rich markup, and
    whole: on a narrow terminal it goes on over more lines (a table cuts it short with an
    ellipsis otherwise, and a type's or schedule's name is what the next command needs)."""
    return Text(shown(value), overflow="fold")


class ShownFormatter(logging.Formatter):
    """Log lines whose server values (an error's detail, say) are ``shown``."""

    def format(self, record: logging.LogRecord) -> str:
        return shown(super().format(record))


@contextmanager
def reported(what: str) -> Iterator[None]:
    """Turn a client error into a one-line message and its documented exit code."""
    try:
        yield
    except QueueError as error:
        raise refusal(what, error) from error


def refusal(what: str, error: QueueError) -> click.ClickException:
    """``error`` as one line that begins with ``what``, with its documented exit code."""
    message = one_line(f"{what}: {error.detail}{_fields(error)} ({error.slug})")
    if isinstance(error, Unauthenticated):
        message += "; the key is read from --api-key or QUEUELOG_API_KEY"
    return failure_for(error)(message)


def _fields(error: QueueError) -> str:
    """What the server said of each refused field (a 422's ``errors``), as ``; name: why``;
    the first few, so the line stays one line a reader takes in."""
    said = error.extra.get("errors")
    if not isinstance(said, list):
        return ""
    parts = []
    for item in said[:_FIELDS_SHOWN]:
        if not isinstance(item, dict):
            continue
        loc = [str(part) for part in item.get("loc", []) if part != "body"]
        if loc[:1] == ["jobs"] and len(loc) > 2:  # a batch's item: the caller names it
            loc = loc[2:]
        part = f"{'.'.join(loc) or 'body'}: {item.get('msg', '')}"
        if part not in error.detail:  # a check that names its field says it in the detail
            parts.append(f"; {part}")
    more = len(said) - _FIELDS_SHOWN
    return "".join(parts) + (f"; and {more} more" if more > 0 else "")
