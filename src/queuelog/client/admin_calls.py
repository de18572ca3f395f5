"""The admin's API calls (keys, job types, schedules), described as ``calls`` describes
the rest: how each request is built and read, and whether it may be sent again."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

from queuelog.client.calls import Call, _drop_none, _job
from queuelog.client.types import Job, JobType, JsonObject, Key, Schedule


def create_key(
    name: str,
    roles: Sequence[str],
    max_priority: str | None = None,
    types: Sequence[str] | None = None,
) -> Call[Key]:
    """Create an API key (admin). Never sent again: a second delivery makes a second key."""
    body = _drop_none(
        {
            "name": name,
            "roles": list(roles),
            "max_priority": max_priority,
            "types": list(types) if types is not None else None,
        }
    )
    return Call("POST", "/keys", Key.from_json, resend=False, json=body)


def list_keys() -> Call[list[Key]]:
    """Every API key, without secrets (admin)."""

    def read(data: Any) -> list[Key]:
        return [Key.from_json(k) for k in data["keys"]]

    return Call("GET", "/keys", read, resend=True)


def revoke_key(key_id: int) -> Call[None]:
    """Revoke an API key (admin); it stops working at once."""

    def read(_: Any) -> None:
        return None

    return Call("DELETE", f"/keys/{key_id}", read, resend=True)


def list_schedules() -> Call[list[Schedule]]:
    """Every schedule, by name (admin)."""

    def read(data: Any) -> list[Schedule]:
        return [Schedule.from_json(s) for s in data["schedules"]]

    return Call("GET", "/schedules", read, resend=True)


def create_schedule(
    name: str,
    type: str,
    *,
    cron: str | None = None,
    every_seconds: int | None = None,
    timezone: str | None = None,
    payload: JsonObject | None = None,
    priority: str | None = None,
    overlap: bool | None = None,
) -> Call[Schedule]:
    """Create a schedule (admin): ``cron`` (five fields) or ``every_seconds``. Never sent
    again: a second delivery would find the name taken (409)."""
    body = _drop_none(
        {
            "name": name,
            "type": type,
            "cron": cron,
            "every_seconds": every_seconds,
            "timezone": timezone,
            "payload": payload,
            "priority": priority,
            "overlap": overlap,
        }
    )
    return Call("POST", "/schedules", Schedule.from_json, resend=False, json=body)


def get_schedule(name: str) -> Call[Schedule]:
    """One schedule (admin)."""
    return Call("GET", f"/schedules/{_segment(name)}", Schedule.from_json, resend=True)


def delete_schedule(name: str) -> Call[None]:
    """Delete a schedule made through the API (admin); its jobs are kept."""

    def read(_: Any) -> None:
        return None

    return Call("DELETE", f"/schedules/{_segment(name)}", read, resend=True)


def pause_schedule(name: str) -> Call[Schedule]:
    """Pause a schedule (admin): stored, on every node."""
    path = f"/schedules/{_segment(name)}/pause"
    return Call("POST", path, Schedule.from_json, resend=True)


def resume_schedule(name: str) -> Call[Schedule]:
    """Resume a schedule (admin) from its next fire time."""
    path = f"/schedules/{_segment(name)}/resume"
    return Call("POST", path, Schedule.from_json, resend=True)


def trigger_schedule(name: str) -> Call[Job]:
    """Make the schedule's job now (admin). Never sent again: each delivery makes a job."""
    return Call("POST", f"/schedules/{_segment(name)}/trigger", _job, resend=False)


def _segment(name: str) -> str:
    """``name`` as one path segment. A dot segment's dots are percent-encoded too: sent as
    they are, they would be resolved away (``/schedules/./pause`` is ``/schedules/pause``)
    and the answer would be another route's."""
    return "%2E" * len(name) if name in {".", ".."} else quote(name, safe="")


def list_types() -> Call[list[JobType]]:
    """Every configured job type with its limits, pause and counts (admin)."""

    def read(data: Any) -> list[JobType]:
        return [JobType.from_json(t) for t in data["types"]]

    return Call("GET", "/types", read, resend=True)


def pause_type(name: str) -> Call[JobType]:
    """Pause a job type (admin): never claimed until resumed. Safe to send again."""
    return Call("POST", f"/types/{_segment(name)}/pause", JobType.from_json, resend=True)


def resume_type(name: str) -> Call[JobType]:
    """Resume a paused job type (admin). Safe to send again."""
    return Call("POST", f"/types/{_segment(name)}/resume", JobType.from_json, resend=True)
