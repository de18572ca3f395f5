"""Intake: what a producer may enqueue, checked and turned into the storage's new jobs.

The checks run in the contract's order: the type is configured, the key may use
it and the priority, the payload fits the limit and the type's JSON Schema.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from queuelog.config import Settings
from queuelog.errors import (
    Forbidden,
    PayloadTooLarge,
    UnknownJobType,
    ValidationFailed,
    quoted,
)
from queuelog.models import ApiKey
from queuelog.schema_messages import payload_validator, schema_message
from queuelog.specs import EnqueueSpec, stored_json
from queuelog.storage.protocol import NewJob


class Intake:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._schemas = {
            name: payload_validator(cfg.payload_schema)
            for name, cfg in settings.types.items()
            if cfg.payload_schema is not None
        }

    def new_job(
        self, caller: ApiKey, spec: EnqueueSpec, now: datetime, index: int | None
    ) -> NewJob:
        """``spec`` as the job to store, or the refusal (naming ``index`` in a batch)."""
        where = {"index": index} if index is not None else {}
        cfg = self.settings.job_type(spec.type)
        if cfg is None:
            raise UnknownJobType(f"Job type {quoted(spec.type)} is not configured", **where)
        if caller.types is not None and spec.type not in caller.types:
            raise Forbidden(f"This key may not enqueue jobs of type {quoted(spec.type)}", **where)
        if spec.priority > caller.max_priority:
            raise Forbidden(f"This key may set priority up to {caller.max_priority.label}", **where)
        limit = self.settings.limits.max_payload_bytes
        payload_text = stored_json(spec.payload)
        if len(payload_text.encode()) > limit:
            raise PayloadTooLarge(f"The payload exceeds {limit} bytes", **where)
        self._check_schema(spec, where)
        _check_items(spec, index)
        run_at = _run_at(spec, now)
        max_retries = cfg.max_retries if spec.max_retries is None else spec.max_retries
        return NewJob(
            type=spec.type,
            payload=spec.payload,
            priority=spec.priority,
            max_retries=max_retries,
            lease_seconds=cfg.lease_seconds,
            run_at=run_at,
            principal=caller.name,
            idempotency_key=spec.idempotency_key,
            fingerprint=spec.fingerprint(max_retries) if spec.idempotency_key else None,
            payload_text=payload_text,
            unique_key=spec.unique_key,
            on_duplicate=spec.on_duplicate,
            group=spec.group,
            trace_context=spec.trace_context,
            depends_on=spec.depends_on,
            depends_on_items=spec.depends_on_items,
            on_dependency_failure=spec.on_dependency_failure,
        )

    def _check_schema(self, spec: EnqueueSpec, where: dict[str, Any]) -> None:
        validator = self._schemas.get(spec.type)
        if validator is None:
            return
        problems = sorted(validator.iter_errors(spec.payload), key=lambda e: list(e.path))
        if problems:
            prefix = ["body", "jobs", where["index"]] if where else ["body"]
            errors = [
                {"loc": [*prefix, "payload", *p.absolute_path], "msg": schema_message(p)}
                for p in problems[:20]
            ]
            detail = "The payload does not match the type's schema"
            raise ValidationFailed(detail, errors=errors, **where)


def _run_at(spec: EnqueueSpec, now: datetime) -> datetime:
    if spec.run_at is not None:
        return max(spec.run_at, now)
    if spec.delay_seconds is not None and spec.delay_seconds > 0:
        return now + timedelta(seconds=spec.delay_seconds)
    return now


def _check_items(spec: EnqueueSpec, index: int | None) -> None:
    """A batch item may wait only for items before it, so a graph made in one request
    has no cycle (a single enqueue names none: it has no items)."""
    own = index if index is not None else 0
    late = [item for item in spec.depends_on_items if item >= own]
    if late:
        raise ValidationFailed(
            f"depends_on_items of item {own} names item {late[0]}: only earlier items may be named",
            errors=[
                {
                    "loc": ["body", "jobs", own, "depends_on_items"],
                    "msg": f"Only items before this one may be named (below {own})",
                }
            ],
            index=own,
        )
