"""The dashboard's state-changing forms. Each goes through JobService or KeyRing,
exactly as the API does, and needs the session's CSRF token."""

from __future__ import annotations

import re
from urllib.parse import urlencode

from fastapi import APIRouter, Request, Response

from queuelog.app_state import IdPath, state_of
from queuelog.dashboard.pages import key_page
from queuelog.dashboard.web import DashboardRoute, Posted, dashboard_of, field_of, render, see
from queuelog.errors import QueueError, ValidationFailed, quoted
from queuelog.models import JobStatus, Priority, Role
from queuelog.specs import TYPE_FILTER_PATTERN

router = APIRouter(prefix="/ui", route_class=DashboardRoute)

KEY_NAME = re.compile(r"[A-Za-z0-9._:@-]{1,64}")  # as POST /keys
FORM_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")  # as pages.key_page makes them


@router.post("/jobs/{job_id:id}/retry")
async def retry_job(request: Request, job_id: IdPath, posted: Posted) -> Response:
    job = await state_of(request).service.redrive.job(posted.admin, job_id)
    if job.status is JobStatus.WAITING:
        return see(request, f"/ui/jobs/{job_id}", "The job is waiting again, for its dependencies.")
    return see(request, f"/ui/jobs/{job_id}", "The job is pending again.")


@router.post("/jobs/{job_id:id}/cancel")
async def cancel_job(request: Request, job_id: IdPath, posted: Posted) -> Response:
    await state_of(request).service.cancel(posted.admin, job_id)
    return see(request, f"/ui/jobs/{job_id}", "The job was cancelled.")


@router.post("/retry-failed")
async def retry_failed(request: Request, posted: Posted) -> Response:
    job_type = field_of(posted.form, "type")
    # As the confirmation page bounds it: the name goes back into the redirect's URL.
    if not re.fullmatch(TYPE_FILTER_PATTERN, job_type):
        raise ValidationFailed("Name the job type whose failed jobs to retry (1-100 characters)")
    count = await state_of(request).service.redrive.failed_of_type(posted.admin, job_type)
    said = f"{count} failed job(s) of this type are pending again."
    return see(request, f"/ui/jobs?{urlencode({'type': job_type})}", said)


@router.post("/types/{job_type:path}/pause")
async def pause_type(request: Request, job_type: str, posted: Posted) -> Response:
    await state_of(request).service.flow.set_paused(posted.admin, job_type, True)
    return see(request, "/ui/types", "The type is paused: its jobs are not claimed until resumed.")


@router.post("/types/{job_type:path}/resume")
async def resume_type(request: Request, job_type: str, posted: Posted) -> Response:
    await state_of(request).service.flow.set_paused(posted.admin, job_type, False)
    return see(request, "/ui/types", "The type is resumed: its jobs are claimed again.")


@router.post("/keys")
async def create_key(request: Request, posted: Posted) -> Response:
    """Create a key and show its plaintext on this one page, never again."""
    state = state_of(request)
    form = posted.form
    sent = dashboard_of(request).sent_forms
    form_id = field_of(form, "form_id")  # none from a script that posts the fields alone
    if form_id and not FORM_ID.fullmatch(form_id):
        raise ValidationFailed("This form did not come from this page: reload it")
    if form_id and not sent.first(form_id):
        page = (await key_page(request)) | {"form_error": _SENT_AGAIN}
        return render(request, "keys.html", 409, **page)
    try:
        name, roles, priority, types = _key_fields(
            field_of(form, "name"),
            [str(r) for r in form.getlist("roles")],
            field_of(form, "max_priority") or "medium",
            [str(t) for t in form.getlist("types")],
            set(state.service.settings.types),
        )
        key, plaintext = await state.keys.create(name, roles, priority, types)
    except QueueError as exc:
        sent.forget(form_id)  # no key was made: the same form may be sent again
        page = (await key_page(request)) | {"form_error": exc.detail}
        return render(request, "keys.html", 422, **page)
    except BaseException:
        sent.forget(form_id)
        raise
    page = (await key_page(request)) | {"created": key, "plaintext": plaintext}
    return render(request, "keys.html", 201, **page)


_SENT_AGAIN = (
    "This form was sent already: its key was made then, and its secret shown that once. "
    "If the secret was not kept, revoke that key below and make another."
)


def _key_fields(
    name: str, roles: list[str], priority: str, types: list[str], configured: set[str]
) -> tuple[str, frozenset[Role], Priority, tuple[str, ...] | None]:
    """The create-key form, checked by the same limits as ``POST /keys``."""
    if not KEY_NAME.fullmatch(name):
        raise ValidationFailed("The name must be 1 to 64 of A-Z a-z 0-9 . _ : @ -")
    try:
        chosen = frozenset(Role(r) for r in roles)
        ceiling = Priority.from_label(priority)
    except ValueError:
        raise ValidationFailed("Unknown role or priority") from None
    if not chosen:
        raise ValidationFailed("Choose at least one role")
    unknown = [t for t in types if t not in configured]
    if unknown:
        raise ValidationFailed(f"Job type {quoted(unknown[0])} is not configured")
    return name, chosen, ceiling, tuple(types) if types else None


@router.post("/keys/{key_id:id}/revoke")
async def revoke_key(request: Request, key_id: IdPath, posted: Posted) -> Response:
    await state_of(request).keys.revoke(key_id)
    return see(request, "/ui/keys", "The key was revoked; it stops working at once.")
