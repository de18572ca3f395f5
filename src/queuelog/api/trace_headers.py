"""The W3C Trace Context headers of an enqueue (``traceparent``, ``tracestate``), checked
as the Trace Context recommendation says a receiver checks them.

A malformed ``traceparent`` is ignored, never refused: the enqueue succeeds and its jobs
carry no trace context, as a traced service would start a new trace. ``tracestate`` is
read only beside a valid ``traceparent``; a malformed one is ignored whole, and a long
one is cut member by member to the size every receiver must keep.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from starlette.datastructures import Headers

from queuelog.models import TraceContext

# version-trace_id-parent_id-flags, lowercase hex; a later version may add "-" fields.
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")
_KEY = r"(?:[a-z][a-z0-9_\-*/]{0,255}|[a-z0-9][a-z0-9_\-*/]{0,240}@[a-z][a-z0-9_\-*/]{0,13})"
_VALUE = r"[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]"
_MEMBER = re.compile(rf"({_KEY})={_VALUE}")
MAX_TRACESTATE_MEMBERS = 32
MAX_TRACESTATE_CHARS = 512  # what every receiver must pass on; longer is cut
_LONG_MEMBER_CHARS = 128  # cut first, when a tracestate is too long
_OWS = " \t"

TRACE_HEADERS: Sequence[tuple[str, str, dict[str, Any]]] = (
    (
        "traceparent",
        "W3C Trace Context: stored with each job this request makes and handed to the "
        "worker that claims it, as the job's `trace_context`. A malformed value (or more "
        "than one) is ignored, never refused. Of a later version's value, the fields "
        "version 00 defines are kept, as a version 00 value (what comes after is not stored).",
        {"type": "string"},
    ),
    (
        "tracestate",
        "W3C Trace Context, read with a valid `traceparent` only: at most "
        f"{MAX_TRACESTATE_MEMBERS} list members (more, a malformed member or a repeated "
        f"key: ignored whole); past {MAX_TRACESTATE_CHARS} characters, members are "
        f"dropped from the end, those over {_LONG_MEMBER_CHARS} characters first.",
        {"type": "string"},
    ),
)


def trace_context_of(headers: Headers) -> TraceContext | None:
    """The request's trace context, or None when it has no valid ``traceparent``."""
    sent = headers.getlist("traceparent")
    if len(sent) != 1:  # several: none can be trusted to be the caller's
        return None
    traceparent = _traceparent(sent[0].strip(_OWS))
    if traceparent is None:
        return None
    return TraceContext(traceparent, _tracestate(headers.getlist("tracestate")))


def _traceparent(value: str) -> str | None:
    match = _TRACEPARENT.fullmatch(value)
    if match is None:
        return None
    version, trace_id, parent_id, flags, more = match.groups()
    if version == "ff" or (version == "00" and more is not None):
        return None
    if trace_id == "0" * 32 or parent_id == "0" * 16:
        return None
    # A later version is read as the version 00 it extends, and passed on as one: a
    # worker is never handed text that was not checked.
    return f"00-{trace_id}-{parent_id}-{flags}"


def _tracestate(values: Sequence[str]) -> str | None:
    """The list members of every ``tracestate`` header, in order (several headers make
    one list), or None if there are none or the list is malformed."""
    members = [m.strip(_OWS) for value in values for m in value.split(",")]
    members = [m for m in members if m]
    if not members or len(members) > MAX_TRACESTATE_MEMBERS:
        return None
    keys = []
    for member in members:
        match = _MEMBER.fullmatch(member)
        if match is None:
            return None
        keys.append(match.group(1))
    if len(set(keys)) != len(keys):
        return None
    return ",".join(_within_bound(members)) or None


def _within_bound(members: list[str]) -> list[str]:
    """``members`` cut to ``MAX_TRACESTATE_CHARS`` joined: the long ones dropped first,
    then from the end (the members first in the list are the latest vendors')."""
    kept = list(members)

    def size() -> int:
        return sum(len(m) for m in kept) + len(kept) - 1

    for member in reversed(members):
        if size() <= MAX_TRACESTATE_CHARS:
            return kept
        if len(member) > _LONG_MEMBER_CHARS:
            kept.remove(member)
    while kept and size() > MAX_TRACESTATE_CHARS:
        kept.pop()
    return kept
