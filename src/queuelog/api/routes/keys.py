"""API key management (admin)."""

from __future__ import annotations

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse

from queuelog.api.answers import KeyCreatedOut, KeyListOut
from queuelog.api.deps import Admin, KeyRingDep, ServiceDep
from queuelog.api.lean import JsonRoute
from queuelog.api.openapi import AUTHED, problems
from queuelog.api.schemas import KeyCreateRequest, priority_of
from queuelog.app_state import IdPath
from queuelog.auth import key_json
from queuelog.errors import UnknownJobType, quoted

router = APIRouter(prefix="/keys", tags=["keys"], route_class=JsonRoute)


@router.post(
    "",
    status_code=201,
    response_model=KeyCreatedOut,
    summary="Create an API key",
    description="The plaintext `key` is in this response only; the server keeps a hash.",
    responses=problems(*AUTHED, 413, 415, 422),
)
async def create_key(
    body: KeyCreateRequest, _: Admin, keys: KeyRingDep, service: ServiceDep
) -> Response:
    for name in body.types or ():
        if service.settings.job_type(name) is None:
            raise UnknownJobType(f"Job type {quoted(name)} is not configured")
    key, plaintext = await keys.create(
        body.name,
        frozenset(body.roles),
        priority_of(body.max_priority),
        tuple(body.types) if body.types is not None else None,
    )
    return JSONResponse(key_json(key) | {"key": plaintext}, status_code=201)


@router.get(
    "", response_model=KeyListOut, summary="List API keys (no secrets)", responses=problems(*AUTHED)
)
async def list_keys(_: Admin, keys: KeyRingDep) -> Response:
    return JSONResponse({"keys": [key_json(k) for k in await keys.list()]})


@router.delete(
    "/{key_id:id}",
    status_code=204,
    summary="Revoke an API key",
    description="The key stops working at once.",
    responses=problems(*AUTHED, 404),
)
async def revoke_key(key_id: IdPath, _: Admin, keys: KeyRingDep) -> Response:
    await keys.revoke(key_id)
    return Response(status_code=204)
