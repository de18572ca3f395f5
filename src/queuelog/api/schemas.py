"""Request models: strict, forbidding unknown fields (no mass assignment). The answers' models
are in ``answers``."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictStr,
    field_validator,
    model_validator,
)
from pydantic.config import JsonDict

from queuelog.auth import KEY_NAME
from queuelog.models import INSTANCE_PATTERN, MAX_DEPENDS_ON, MAX_ID, Priority, Role
from queuelog.plain_json import check_plain
from queuelog.schedules import PUBLISHED_SCHEDULE_NAME
from queuelog.specs import CURSOR_PATTERN, TYPE_FILTER_PATTERN

PriorityLabel = Literal["low", "medium", "high", "critical"]


def _lower(value: Any) -> Any:
    return value.lower() if isinstance(value, str) else value


# RFC 3339's date-time, as JSON Schema's "date-time" format reads it: a time zone is
# part of it. Neither a number (a Unix time) nor a bare date is one.
_RFC3339 = re.compile(
    r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})", re.IGNORECASE
)


def _rfc3339(value: Any) -> Any:
    if not isinstance(value, str) or not _RFC3339.fullmatch(value):
        raise ValueError("must be an RFC 3339 date-time with a time zone (2026-12-01T09:30:00Z)")
    return value


def _in_utc_range(value: datetime) -> datetime:
    # A time is stored as UTC: one whose zone moves it past year 9999 (or before year 1)
    # cannot be, though its own digits are a valid date-time.
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise ValueError("must fall, in UTC, between years 1 and 9999") from None


Label = Annotated[PriorityLabel, BeforeValidator(_lower)]
AwareTime = Annotated[datetime, BeforeValidator(_rfc3339), AfterValidator(_in_utc_range)]
IDEMPOTENCY_KEY_PATTERN = r"^[ -~]{1,255}$"  # printable ASCII
IdempotencyKey = Annotated[StrictStr, Field(pattern=IDEMPOTENCY_KEY_PATTERN)]
UniqueKey = IdempotencyKey  # the same shape: 1-255 printable ASCII
GROUP_PATTERN = r"^[ -~]{1,128}$"  # printable ASCII
Group = Annotated[
    StrictStr,
    Field(
        pattern=GROUP_PATTERN,
        description="1-128 printable ASCII: a tenant, an account, a partner. Jobs of one "
        "group share the type's `group_concurrency`; jobs without a group are not limited "
        "by it.",
    ),
]


def _integral(value: Any) -> Any:
    # JSON Schema's integer is any number without a fraction: 5.0 is the integer 5.
    return int(value) if isinstance(value, float) and value.is_integer() else value


# NaN and the infinities (Python's JSON reads the literals) are refused as not finite,
# not as out of a bound.
Number = Annotated[float, Field(strict=True, allow_inf_nan=False)]
# Strict otherwise: neither a string of digits nor a boolean is a number. The bounds
# stand before the validator, so that the published schema carries them.
RowId = Annotated[int, Field(strict=True, ge=1, le=MAX_ID), BeforeValidator(_integral)]
MaxRetries = Annotated[int, Field(strict=True, ge=0, le=25), BeforeValidator(_integral)]
ClaimLimit = Annotated[int, Field(strict=True, ge=1, le=100), BeforeValidator(_integral)]
LeaseSeconds = Annotated[int, Field(strict=True, ge=1, le=3600), BeforeValidator(_integral)]
LingerMs = Annotated[int, Field(strict=True, ge=0, le=1000), BeforeValidator(_integral)]
EverySeconds = Annotated[int, Field(strict=True, ge=1, le=366 * 86_400), BeforeValidator(_integral)]
CRON_FIVE_FIELDS = r"^ *[!-~]+( +[!-~]+){4} *$"  # minute hour day month weekday, by spaces
KEY_NAME_PATTERN = f"^{KEY_NAME.pattern}$"

# What a field's pattern asks for, in words: a 422 says these, not the regular expression.
PATTERNS_SAY = {
    IDEMPOTENCY_KEY_PATTERN: "1-255 printable ASCII characters",
    GROUP_PATTERN: "1-128 printable ASCII characters",
    CRON_FIVE_FIELDS: "five fields of ASCII (minute hour day month weekday) between spaces",
    INSTANCE_PATTERN: "1-64 of A-Z a-z 0-9 . _ -",
    KEY_NAME_PATTERN: "1-64 of A-Z a-z 0-9 . _ : @ -",
    PUBLISHED_SCHEDULE_NAME: "1-64 of a-z 0-9 _ . -, not . or ..",
    CURSOR_PATTERN: "an id (a page's next_cursor)",
    TYPE_FILTER_PATTERN: "1-100 characters, none of them a control character",
}


def _plain_json(value: dict[str, Any]) -> dict[str, Any]:
    check_plain(value)
    return value


JsonObject = Annotated[dict[str, Any], AfterValidator(_plain_json)]


def _distinct(values: list[int]) -> list[int]:
    if len(set(values)) != len(values):
        raise ValueError("must not name a job twice")
    return values


# At most MAX_DEPENDS_ON dependencies by id: a job's dependencies are read with it.
# Of a whole batch: a request's dependencies cost the loop time in step with their number.
MAX_BATCH_DEPENDENCIES = 10_000
ItemIndex = Annotated[int, Field(strict=True, ge=0, le=498), BeforeValidator(_integral)]
DependsOn = Annotated[
    list[RowId],
    Field(
        max_length=MAX_DEPENDS_ON,
        json_schema_extra={"uniqueItems": True},
        description=(
            "Ids of jobs this key enqueued (any job, for an admin) that this job waits for: "
            "it is `waiting` until every one has completed (see `on_dependency_failure`). "
            "An id of no such job (another producer's, or one this key only holds as a "
            "worker: waiting for a job lets its producer read the job's outcome for good), "
            "or one named twice, is 422 `validation`, as for a missing id."
        ),
    ),
    AfterValidator(_distinct),
]
DependencyMode = Literal["cancel", "run"]
_MODE_TEXT = (
    "When a dependency fails or is cancelled: `cancel` (default) cancels this job too (event "
    "`dependency_failed`), and so the jobs that wait on it; `run` makes it pending once every "
    "dependency has ended, whatever the outcome. Without dependencies it changes nothing."
)


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


_BOTH_TIMES: JsonDict = {
    "required": ["run_at", "delay_seconds"],
    "properties": {"run_at": {"type": "string"}, "delay_seconds": {"type": "number"}},
}
_DUPLICATE_RULE_WITHOUT_KEY: JsonDict = {
    "required": ["on_duplicate"],
    "properties": {"on_duplicate": {"type": "string"}},
    "not": {"required": ["unique_key"], "properties": {"unique_key": {"type": "string"}}},
}


class EnqueueRequest(_Request):
    # The published schema says what the model's checks say: not both run_at and
    # delay_seconds; on_duplicate only with a unique_key.
    model_config = ConfigDict(
        json_schema_extra={
            "allOf": [
                {"not": _BOTH_TIMES},
                {"not": _DUPLICATE_RULE_WITHOUT_KEY},
            ]
        }
    )

    type: StrictStr = Field(min_length=1, max_length=100, description="A configured job type.")
    payload: JsonObject = Field(default_factory=dict)
    priority: Label = Field(
        "low", description="Case-insensitive; capped by the key's max_priority."
    )
    max_retries: MaxRetries | None = None
    run_at: AwareTime | None = None
    delay_seconds: Number | None = Field(None, ge=0, le=366 * 86_400)
    idempotency_key: IdempotencyKey | None = None
    unique_key: UniqueKey | None = Field(
        None,
        description=(
            "While a job of this principal and type with this key is waiting, pending or "
            "running, no enqueue makes a second one (but a `replace` while it runs): see "
            "`on_duplicate`. An admin's redrive "
            "brings a job back even beside a newer holder of its key (enqueues then meet the "
            "newest waiting or pending one)."
        ),
    )
    on_duplicate: Literal["keep", "replace"] | None = Field(
        None,
        description=(
            "With `unique_key`: `keep` (default) answers 200 with the active job; `replace` "
            "gives a waiting or pending one this request's payload, priority and run_at (200, "
            "event `replaced`; its other fields stay as they are), or makes a new job (201) "
            "while the one holding the key runs."
        ),
    )
    group: Group | None = None
    depends_on: DependsOn | None = None
    on_dependency_failure: DependencyMode | None = Field(None, description=_MODE_TEXT)

    @model_validator(mode="after")
    def _one_schedule(self) -> EnqueueRequest:
        if self.run_at is not None and self.delay_seconds is not None:
            raise ValueError("give run_at or delay_seconds, not both")
        if self.on_duplicate is not None and self.unique_key is None:
            raise ValueError("on_duplicate needs a unique_key")
        return self


class BatchEnqueueItem(EnqueueRequest):
    depends_on_items: (
        Annotated[
            list[ItemIndex],
            Field(
                max_length=499,
                json_schema_extra={"uniqueItems": True},
                description=(
                    "Indices of earlier items of this batch that this job waits for, as "
                    "`depends_on` names jobs by id: each below this item's own index, else "
                    "422 `validation` naming the item (one item may wait for all the others: "
                    'a batch\'s "when all are done" job).'
                ),
            ),
            AfterValidator(_distinct),
        ]
        | None
    ) = None


class BatchEnqueueRequest(_Request):
    jobs: list[BatchEnqueueItem] = Field(
        min_length=1,
        max_length=500,
        description=(
            f"At most {MAX_BATCH_DEPENDENCIES:,} dependencies (`depends_on` and "
            "`depends_on_items`) in all the items, else 422 `validation`: each costs the "
            "insert a row and a check."
        ),
    )

    @field_validator("jobs")
    @classmethod
    def _dependencies_in_the_batch(cls, jobs: list[BatchEnqueueItem]) -> list[BatchEnqueueItem]:
        named = sum(len(j.depends_on or ()) + len(j.depends_on_items or ()) for j in jobs)
        if named > MAX_BATCH_DEPENDENCIES:
            raise ValueError(f"a batch names at most {MAX_BATCH_DEPENDENCIES:,} dependencies")
        return jobs


class ClaimRequest(_Request):
    types: list[Annotated[StrictStr, Field(min_length=1, max_length=100)]] | None = Field(
        None,
        min_length=1,
        max_length=100,
        description=(
            "The job types to claim; each must be configured on this node (else 422 "
            "`unknown-job-type`) and allowed to the key (else 403). Omitted: every type this "
            "node configures that the key may claim; jobs of a type only another node "
            "configures are left to that node's claims and limits."
        ),
    )
    limit: ClaimLimit = 1
    wait_seconds: Number = Field(0, ge=0, le=30)
    linger_ms: LingerMs = Field(
        0,
        description=(
            "Once the claim holds at least one job but fewer than `limit`, how long it goes "
            "on taking jobs that become ready before it answers (0: answer at once)."
        ),
    )
    lease_seconds: LeaseSeconds | None = None
    instance: Annotated[StrictStr, Field(pattern=INSTANCE_PATTERN)] | None = None


LeaseToken = Annotated[StrictStr, Field(min_length=1, max_length=64)]


class ReleaseRequest(_Request):
    lease_token: LeaseToken
    delay_seconds: Number = Field(
        0, ge=0, le=86_400, description="Pending again this long from now (a snooze)."
    )


class HeartbeatRequest(_Request):
    lease_token: LeaseToken
    lease_seconds: LeaseSeconds | None = None
    progress: JsonObject | None = Field(
        None,
        description=(
            "How far the work is: the job shows the last one given (a heartbeat without it "
            "keeps it). At most 4,096 bytes as compact UTF-8 JSON, else 422 "
            "`payload-too-large`."
        ),
    )


class CompleteRequest(_Request):
    lease_token: LeaseToken
    result: JsonObject | None = None


# An error text is cut to 2,000 characters when stored; a longer one is refused
# before any work is spent on it.
MAX_ERROR_REQUEST_CHARS = 16 * 1024


def _bounded_error(value: str) -> str:
    # Checked here, not with max_length: pydantic's length check refuses a lone
    # surrogate, which the stored text replaces instead.
    if len(value) > MAX_ERROR_REQUEST_CHARS:
        raise ValueError(f"must be at most {MAX_ERROR_REQUEST_CHARS} characters")
    return value


class FailRequest(_Request):
    lease_token: LeaseToken
    error: Annotated[
        StrictStr,
        AfterValidator(_bounded_error),
        Field(json_schema_extra={"maxLength": MAX_ERROR_REQUEST_CHARS}),
    ]
    retryable: StrictBool = True
    retry_in_seconds: Number | None = Field(None, ge=0, le=366 * 86_400)


class BatchCompleteItem(_Request):
    id: RowId
    lease_token: LeaseToken
    result: JsonObject | None = None


class BatchCompleteRequest(_Request):
    items: list[BatchCompleteItem] = Field(min_length=1, max_length=100)


KeyName = Annotated[StrictStr, Field(pattern=KEY_NAME_PATTERN)]


class KeyCreateRequest(_Request):
    name: KeyName
    roles: list[Role] = Field(min_length=1, max_length=3)
    max_priority: Label = "medium"
    types: (
        Annotated[
            list[Annotated[StrictStr, Field(min_length=1, max_length=100)]],
            Field(
                min_length=1,
                description="The types this key may enqueue and claim (each once); omitted "
                "or null: every type. An empty list is 422 `validation`.",
            ),
        ]
        | None
    ) = None


def priority_of(label: str) -> Priority:
    return Priority.from_label(label)
