"""Hooks for the schemathesis run of tests/system/test_openapi_conformance.py.

Two rules no schema can carry are kept out of the generated requests; the tests
named here check them:

- an idempotency key used again with another request, or a header key that differs
  from the body's, is 422 (a rule of state, and of two fields together): each valid
  key is made fresh (tests/api/test_idempotency.py);
- a long-poll claim on an empty queue, or a read awaiting an unfinished job, waits
  the whole ``wait_seconds``: a valid wait is cut to a second, so forty of them do
  not take twenty minutes (tests/reliability/test_long_poll.py, tests/api/test_results.py);
- a cron of five fields whose values are out of range (minute 61) is 422: the range of
  each field is cronsim's to check (tests/unit/test_schedules.py), so such a cron is
  made a valid one;
- a dependency must be a job the key sees (a rule of state), and a batch item may name
  only earlier items (a rule of an item's place): a valid ``depends_on`` is emptied
  and a valid ``depends_on_items`` keeps the earlier items only, and no more than the
  batch's bound on dependencies in all (a rule of the items together)
  (tests/api/test_workflow_refusals.py).

Values the schema refuses are left as generated.
"""

from __future__ import annotations

import copy
import re
import uuid
from datetime import datetime
from typing import Any

import schemathesis
from cronsim import CronSim, CronSimError

from queuelog.api.schemas import (
    CRON_FIVE_FIELDS,
    IDEMPOTENCY_KEY_PATTERN,
    MAX_BATCH_DEPENDENCIES,
)
from queuelog.models import MAX_DEPENDS_ON, MAX_ID


def _valid_key(value: Any) -> bool:
    return isinstance(value, str) and re.fullmatch(IDEMPOTENCY_KEY_PATTERN, value) is not None


def _fresh_key(item: Any) -> str | None:
    if isinstance(item, dict) and _valid_key(item.get("idempotency_key")):
        item["idempotency_key"] = uuid.uuid4().hex
        return str(item["idempotency_key"])
    return None


def _short_wait(values: Any) -> None:
    wait = values.get("wait_seconds") if isinstance(values, dict) else None
    if isinstance(wait, str) and wait.isdigit():
        wait = int(wait)
    if isinstance(wait, int | float) and not isinstance(wait, bool) and 1 < wait <= 30:
        values["wait_seconds"] = 1


def _valid_cron(body: Any) -> None:
    cron = body.get("cron") if isinstance(body, dict) else None
    if isinstance(cron, str) and re.fullmatch(CRON_FIVE_FIELDS, cron):
        try:
            CronSim(cron, datetime(2000, 1, 1))
        except CronSimError:
            body["cron"] = "*/5 * * * *"


def _ids(value: Any, low: int, high: int, most: int) -> list[int] | None:
    """``value`` as the schema's list of distinct integers in ``[low, high]``, else None.

    The bounds are compared as schemathesis's checker compares numbers, in double
    precision: it takes an id just above 2**63 - 1 for one within the bound.
    """
    if not isinstance(value, list) or len(value) > most:
        return None
    ids = []
    for item in value:
        if isinstance(item, bool) or not isinstance(item, int | float):
            return None
        if item != int(item) or not float(low) <= float(item) <= float(high):
            return None
        ids.append(int(item))
    return ids if len(set(ids)) == len(ids) else None


def _existing_dependencies(job: Any, index: int) -> None:
    if not isinstance(job, dict):
        return
    if _ids(job.get("depends_on"), 1, MAX_ID, MAX_DEPENDS_ON) is not None:
        job["depends_on"] = []
    items = _ids(job.get("depends_on_items"), 0, 498, 499)
    if items is not None:
        job["depends_on_items"] = [item for item in items if item < index]


@schemathesis.hook
def map_case(ctx: Any, case: Any) -> Any:
    # Generated cases may share one body object: each gets its own before it changes.
    case.body = body = copy.deepcopy(case.body)
    headers = case.headers if case.headers is not None else {}
    if case.operation.path == "/jobs/claim":
        _short_wait(body)
    if case.operation.path == "/jobs/{job_id}" and case.query:
        _short_wait(case.query)
    if case.operation.path == "/schedules":
        _valid_cron(body)
    key = _fresh_key(body)
    if case.operation.path == "/jobs":
        _existing_dependencies(body, 0)
    if isinstance(body, dict) and isinstance(body.get("jobs"), list):
        room = MAX_BATCH_DEPENDENCIES
        for index, job in enumerate(body["jobs"]):
            _fresh_key(job)
            _existing_dependencies(job, index)
            if isinstance(job, dict) and isinstance(job.get("depends_on_items"), list):
                job["depends_on_items"] = job["depends_on_items"][: max(room, 0)]
                room -= len(job["depends_on_items"])
    if _valid_key(headers.get("Idempotency-Key")):
        headers["Idempotency-Key"] = key or uuid.uuid4().hex
    return case
