"""Settings: a TOML file, then single ``QUEUELOG_*`` environment overrides."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from queuelog.models import JobStatus, Priority
from queuelog.plain_json import check_plain
from queuelog.schedules import Cadence, CadenceError, schedule_name_error
from queuelog.schema_messages import field_message, payload_schema_problem

DEFAULT_DATABASE = "sqlite:///./data/queuelog.db"
SQLITE_PREFIX = "sqlite:///"
POSTGRES_PREFIXES = ("postgresql://", "postgres://")


class _Strict(BaseModel):
    # Every value of its setting's type as TOML wrote it (true is no number of seconds,
    # "2048" no number of bytes); the environment's text is read as its setting's type
    # first (_typed). Every number finite: TOML and the environment can say inf and nan,
    # and a sweep every inf seconds, or a rate window of inf, stops the queue instead.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, strict=True)


_MIB = 1024 * 1024
_YEAR_SECONDS = 366 * 86_400
_RETENTION_MAX_SECONDS = 100 * _YEAR_SECONDS
# What a request holds beside its payload or result, at most: its type, keys, group and
# a hundred dependencies' ids; a completion's lease token.
_REQUEST_ROOM = 4096


class Limits(_Strict):
    max_request_bytes: int = Field(_MIB, ge=1024, le=64 * _MIB)
    max_payload_bytes: int = Field(65_536, ge=2, le=64 * _MIB)
    max_result_bytes: int = Field(65_536, ge=2, le=64 * _MIB)
    rate_per_second: float = Field(200, ge=0)
    # Bounded: the bucket counts its tokens as a float (a burst of 400 digits was no
    # float, and every request of every key a 500).
    rate_burst: int = Field(400, ge=1, le=1_000_000_000)

    @field_validator("rate_per_second")
    @classmethod
    def _rate(cls, rate: float) -> float:
        # A 429 says when a token comes back, up to 1 / rate seconds: a rate below one a
        # year made that wait a number no header can carry (a 500 past the burst).
        if 0 < rate < 1 / _YEAR_SECONDS:
            raise ValueError(f"must be 0 (off) or at least one a year ({1 / _YEAR_SECONDS:.3g})")
        return rate

    @model_validator(mode="after")
    def _bodies_hold_their_limits(self) -> Limits:
        # A payload or result the limits take must fit in a request, beside the rest of
        # it: else one near its limit is 413 body-too-large where 422 payload-too-large
        # is promised, and a worker's completion carrying such a result never lands.
        for name in ("max_payload_bytes", "max_result_bytes"):
            if getattr(self, name) > self.max_request_bytes - _REQUEST_ROOM:
                raise ValueError(f"{name} must be at most max_request_bytes less {_REQUEST_ROOM}")
        return self


class Server(_Strict):
    """What ``queuelog serve`` lets in: beyond ``limit_concurrency`` open connections
    (or requests in flight), a request is answered 503. A long-poll claim is woken when a
    job is made ready; it also looks again every ``claim_recheck_seconds``, for jobs made
    ready where no notification reaches it. With ``otel``, every request is traced
    through OpenTelemetry's ASGI instrumentation (the ``otel`` extra). A dashboard login
    lasts ``ui_session_seconds``, bounded below so that a login can be used at all."""

    limit_concurrency: int = Field(1000, ge=1)
    # Bounded below: a waiting claim looks again this often, each look a query.
    claim_recheck_seconds: float = Field(1.0, ge=0.01, le=30)
    otel: bool = False
    ui_session_seconds: int = Field(8 * 3600, ge=60, le=30 * 86_400)


class Retention(_Strict):
    """How long finished jobs are kept, in seconds; 0 keeps them forever."""

    # Bounded: the pruner's cutoff is now less this, and a time before the year 1 is no
    # date (every pass of the pruner failed, and nothing of any status was pruned).
    completed_seconds: int = Field(7 * 86_400, ge=0, le=_RETENTION_MAX_SECONDS)
    cancelled_seconds: int = Field(7 * 86_400, ge=0, le=_RETENTION_MAX_SECONDS)
    failed_seconds: int = Field(30 * 86_400, ge=0, le=_RETENTION_MAX_SECONDS)

    def cutoffs(self, now: datetime) -> dict[JobStatus, datetime]:
        """Per finished status, the time before which its jobs are deleted (kept ones
        left out)."""
        ages = {
            JobStatus.COMPLETED: self.completed_seconds,
            JobStatus.CANCELLED: self.cancelled_seconds,
            JobStatus.FAILED: self.failed_seconds,
        }
        return {s: now - timedelta(seconds=age) for s, age in ages.items() if age > 0}


class RateLimit(_Strict):
    """At most ``jobs`` claims of a type in any window of ``per_seconds``."""

    jobs: StrictInt = Field(ge=1)
    # Bounded below: windows are counted in microseconds, and a window too short to
    # count limits nothing.
    per_seconds: float = Field(ge=0.001, le=366 * 86_400)


class JobTypeConfig(_Strict):
    max_retries: int = Field(3, ge=0, le=25)
    lease_seconds: int = Field(30, ge=1, le=3600)
    # 0: a failed attempt is claimable again at once.
    backoff_base_seconds: float = Field(2, ge=0, le=86_400)
    backoff_cap_seconds: float = Field(3600, gt=0, le=366 * 86_400)
    payload_schema: dict[str, Any] | None = None
    # Flow control, across every worker and node (absent: no limit).
    concurrency: StrictInt | None = Field(None, ge=1)
    group_concurrency: StrictInt | None = Field(None, ge=1)
    rate_limit: RateLimit | None = None

    @field_validator("payload_schema")
    @classmethod
    def _payload_schema(cls, schema: dict[str, Any] | None) -> dict[str, Any] | None:
        if schema is not None and (problem := payload_schema_problem(schema)):
            raise ValueError(problem)
        return schema

    @property
    def limited(self) -> bool:
        """Whether a claim of this type must count before it takes a job."""
        return (
            self.concurrency is not None
            or self.group_concurrency is not None
            or self.rate_limit is not None
        )


class ScheduleConfig(_Strict):
    """``[schedules.NAME]``: a recurring job. The cadence rules (one of ``cron`` and
    ``every_seconds``, five cron fields, a known time zone) are checked by
    ``Cadence.parse``, for the file and the API alike."""

    cron: StrictStr | None = Field(None, min_length=1, max_length=200)
    every_seconds: StrictInt | None = Field(None, ge=1, le=366 * 86_400)
    timezone: StrictStr = Field("UTC", min_length=1, max_length=100)
    type: StrictStr = Field(min_length=1, max_length=100)
    payload: dict[str, Any] = Field(default_factory=dict)
    priority: StrictStr = "low"
    overlap: StrictBool = True

    @field_validator("priority")
    @classmethod
    def _priority(cls, label: str) -> str:
        return Priority.from_label(label).label

    @field_validator("payload")
    @classmethod
    def _plain(cls, payload: dict[str, Any]) -> dict[str, Any]:
        check_plain(payload)  # TOML's nan and inf: JSON cannot carry them
        return payload

    def cadence(self) -> Cadence:
        return Cadence.parse(self.cron, self.every_seconds, self.timezone)


class Settings(_Strict):
    database: str = DEFAULT_DATABASE
    durability: Literal["full", "normal"] = "full"
    limits: Limits = Limits()
    server: Server = Server()
    retention: Retention = Retention()
    types: dict[str, JobTypeConfig] = Field(default_factory=dict)
    # Bounded below, as a waiting claim's recheck: each sweep is writes to the database
    # (1e-9 s kept a core busy with them), and the pruner counts its sweeps (5e-324 s made
    # that count no number: serve stopped with a traceback, its admin key made).
    sweep_interval_seconds: float = Field(1.0, ge=0.01, le=3600)
    # PostgreSQL: how long a request waits for a pooled connection before it is
    # answered 503 `unavailable`.
    connection_wait_seconds: float = Field(2.0, gt=0, le=600)
    schedules: dict[str, ScheduleConfig] = Field(default_factory=dict)

    @field_validator("database")
    @classmethod
    def _database_url(cls, url: str) -> str:
        # The URL itself is not repeated: a PostgreSQL one may carry a password.
        if url.startswith(POSTGRES_PREFIXES):
            return url
        if not url.startswith(SQLITE_PREFIX):
            raise ValueError("must be a sqlite:///PATH or postgresql:// URL")
        path = url[len(SQLITE_PREFIX) :]
        if not path or "?" in path or path == ":memory:":
            # SQLite's own options are the queue's to set (durability, WAL): a query
            # would otherwise become part of the file's name. Each connection would have
            # an in-memory database of its own.
            raise ValueError(
                "a sqlite:/// URL is the path of a file, without ?query "
                "(a file whose name holds a ? must be renamed)"
            )
        return url

    @field_validator("types")
    @classmethod
    def _type_names(cls, types: dict[str, JobTypeConfig]) -> dict[str, JobTypeConfig]:
        for name in types:
            if not 1 <= len(name) <= 100 or not name.isprintable():
                raise ValueError(f"bad job type name: {name!r}")
            if name in {".", ".."}:  # clients resolve it out of /types/NAME/pause
                raise ValueError(
                    f"job type name {name!r}: not . or .. (its routes could not be reached)"
                )
        return types

    @model_validator(mode="after")
    def _schedules_are_well_formed(self) -> Settings:
        for name, schedule in self.schedules.items():
            where = f"schedules.{name}"
            if problem := schedule_name_error(name):
                raise ValueError(f"{where}: {problem}")
            try:  # whether it ever fires is the scheduler's to say (ScheduleIntake.spec)
                schedule.cadence()
            except CadenceError as exc:
                raise ValueError(f"{where}.{exc}") from None
            if schedule.type not in self.types:
                raise ValueError(f"{where}.type: job type {schedule.type!r} is not configured")
        return self

    def job_type(self, name: str) -> JobTypeConfig | None:
        return self.types.get(name)

    @property
    def sqlite_path(self) -> Path | None:
        """The file of a ``sqlite:///`` database URL, or None for another backend."""
        if not self.database.startswith(SQLITE_PREFIX):
            return None
        return Path(self.database[len(SQLITE_PREFIX) :])


# Environment variable -> (section, setting). Only single settings can be overridden.
ENV_OVERRIDES: dict[str, tuple[str | None, str]] = {
    "QUEUELOG_DATABASE_URL": (None, "database"),
    "QUEUELOG_DURABILITY": (None, "durability"),
    "QUEUELOG_SWEEP_INTERVAL_SECONDS": (None, "sweep_interval_seconds"),
    "QUEUELOG_CONNECTION_WAIT_SECONDS": (None, "connection_wait_seconds"),
    "QUEUELOG_MAX_REQUEST_BYTES": ("limits", "max_request_bytes"),
    "QUEUELOG_MAX_PAYLOAD_BYTES": ("limits", "max_payload_bytes"),
    "QUEUELOG_MAX_RESULT_BYTES": ("limits", "max_result_bytes"),
    "QUEUELOG_RATE_PER_SECOND": ("limits", "rate_per_second"),
    "QUEUELOG_RATE_BURST": ("limits", "rate_burst"),
    "QUEUELOG_LIMIT_CONCURRENCY": ("server", "limit_concurrency"),
    "QUEUELOG_CLAIM_RECHECK_SECONDS": ("server", "claim_recheck_seconds"),
    "QUEUELOG_OTEL": ("server", "otel"),
    "QUEUELOG_UI_SESSION_SECONDS": ("server", "ui_session_seconds"),
}


def load_settings(
    path: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None
) -> Settings:
    """Read the TOML file (``path`` or ``$QUEUELOG_CONFIG``), then apply env overrides."""
    env = os.environ if environ is None else environ
    path = path or env.get("QUEUELOG_CONFIG")
    data: dict[str, Any] = {}
    if path:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    overridden: dict[str, str] = {}
    for var, (section, key) in ENV_OVERRIDES.items():
        if var in env:
            target = data.setdefault(section, {}) if section else data
            if not isinstance(target, dict):
                raise ConfigError(f"{section}: must be a table ([{section}])")
            target[key] = _typed(var, section, key, env[var])
            overridden[f"{section}.{key}" if section else key] = var
    try:
        return Settings.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_first_problem(exc, overridden)) from None


def _typed(var: str, section: str | None, key: str, text: str) -> Any:
    """The text of environment variable ``var`` as the type of the setting it sets."""
    model = Settings if section is None else Settings.model_fields[section].annotation
    assert isinstance(model, type) and issubclass(model, BaseModel), section
    annotation = model.model_fields[key].annotation
    assert annotation is not None, key
    try:
        return TypeAdapter(annotation).validate_python(text)
    except ValidationError as exc:
        where = f"{section}.{key}" if section else key
        raise ConfigError(f"{var} ({where}): {field_message(exc.errors()[0], {})}") from None


class ConfigError(ValueError):
    """A setting the queue cannot run with; its text is one line naming the setting."""


def _first_problem(exc: ValidationError, overridden: Mapping[str, str]) -> str:
    """The first refused setting as one line: its dotted name (and the environment
    variable that set it, if one did: the file may not have it at all), then why."""
    error = exc.errors()[0]
    name = ".".join(str(part) for part in error["loc"])
    if name in overridden:
        name = f"{overridden[name]} ({name})"
    message = field_message(error, {})
    if error["type"] == "model_type":  # pydantic names its model class, not the file's form
        message = "should be a table of its own settings (TOML: { name = value, ... })"
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    # A check of the whole file names the setting in its message.
    return f"{name}: {message}{more}" if name else f"{message}{more}"
