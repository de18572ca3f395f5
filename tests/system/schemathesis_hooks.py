"""Hooks for the schemathesis run of tests/system/test_openapi_conformance.py.

Two rules no schema can carry are kept out of the generated requests; the tests
named here check them:

- an idempotency key used again with another request, or a header key that differs
  from the body's, is 422 (a rule of state, and of two fields together): each valid
  key is made fresh (tests/api/test_idempotency.py);
- a long-poll claim on an empty queue waits the whole ``wait_seconds``: a valid wait
  is cut to a second, so forty claims do not take twenty minutes
  (tests/reliability/test_long_poll.py).

Values the schema refuses are left as generated.
"""

from __future__ import annotations

import copy
import re
import uuid
from typing import Any

import schemathesis

from queuelog.api.schemas import IDEMPOTENCY_KEY_PATTERN


def _valid_key(value: Any) -> bool:
    return isinstance(value, str) and re.fullmatch(IDEMPOTENCY_KEY_PATTERN, value) is not None


def _fresh_key(item: Any) -> str | None:
    if isinstance(item, dict) and _valid_key(item.get("idempotency_key")):
        item["idempotency_key"] = uuid.uuid4().hex
        return str(item["idempotency_key"])
    return None


def _short_wait(body: Any) -> None:
    wait = body.get("wait_seconds") if isinstance(body, dict) else None
    if isinstance(wait, int | float) and not isinstance(wait, bool) and 1 < wait <= 30:
        body["wait_seconds"] = 1


@schemathesis.hook
def map_case(ctx: Any, case: Any) -> Any:
    # Generated cases may share one body object: each gets its own before it changes.
    case.body = body = copy.deepcopy(case.body)
    headers = case.headers if case.headers is not None else {}
    if case.operation.path == "/jobs/claim":
        _short_wait(body)
    key = _fresh_key(body)
    if isinstance(body, dict) and isinstance(body.get("jobs"), list):
        for job in body["jobs"]:
            _fresh_key(job)
    if _valid_key(headers.get("Idempotency-Key")):
        headers["Idempotency-Key"] = key or uuid.uuid4().hex
    return case
