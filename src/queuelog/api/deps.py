"""Dependencies shared by the routes: the service, the caller's key, role checks."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from queuelog.app_state import state_of
from queuelog.auth import KeyRing
from queuelog.errors import Forbidden, Unauthenticated
from queuelog.models import ApiKey, Role
from queuelog.service import JobService

# The dependencies are coroutines because FastAPI runs a plain function in the
# thread pool: one thread hop per dependency per request. None of them blocks
# for long: key lookups are cached, and a miss is one indexed read.


async def _service(request: Request) -> JobService:
    return state_of(request).service


async def _keyring(request: Request) -> KeyRing:
    return state_of(request).keys


_bearer = HTTPBearer(auto_error=False, description="An API key: `Authorization: Bearer ql_...`")


async def authenticate(
    request: Request, presented: str | None, during_fault: bool = False
) -> ApiKey:
    """The active key for the presented secret (401 otherwise), with a rate-limit token
    taken for it (429 when none is left); ``during_fault``: see ``KeyRing.authenticate``."""
    # One credential per request: with two Authorization headers a proxy and this
    # server could each read a different one.
    if len(request.headers.getlist("authorization")) > 1:
        raise Unauthenticated("Send one Authorization header, not several")
    state = state_of(request)
    key = await state.keys.authenticate(presented, during_fault)
    state.limiter.check(key.id)
    return key


def check_role(key: ApiKey, roles: Sequence[Role]) -> ApiKey:
    """``key``, if it holds one of ``roles``; 403 otherwise."""
    if not any(key.has(role) for role in roles):
        names = " or ".join(r.value for r in roles)
        raise Forbidden(f"This route needs the {names} role")
    return key


async def _current_key(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> ApiKey:
    return await authenticate(request, credentials.credentials if credentials else None)


async def _metrics_reader(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> ApiKey:
    # /metrics tells how the storage fails: while the database cannot be read, an admin
    # key this node found active before still reads it (else no scrape saw a fault on
    # PostgreSQL, where a key is read from the database that is away).
    presented = credentials.credentials if credentials else None
    return check_role(await authenticate(request, presented, during_fault=True), [Role.ADMIN])


ServiceDep = Annotated[JobService, Depends(_service)]
KeyRingDep = Annotated[KeyRing, Depends(_keyring)]
CurrentKey = Annotated[ApiKey, Depends(_current_key)]


def require(*roles: Role) -> Callable[[ApiKey], Awaitable[ApiKey]]:
    """A dependency: the caller's key, which must hold one of ``roles``."""

    async def check(key: CurrentKey) -> ApiKey:
        return check_role(key, roles)

    return check


Producer = Annotated[ApiKey, Depends(require(Role.PRODUCER))]
Worker = Annotated[ApiKey, Depends(require(Role.WORKER))]
Admin = Annotated[ApiKey, Depends(require(Role.ADMIN))]
MetricsReader = Annotated[ApiKey, Depends(_metrics_reader)]
Reader = Annotated[ApiKey, Depends(require(Role.PRODUCER, Role.WORKER, Role.ADMIN))]
Canceller = Annotated[ApiKey, Depends(require(Role.PRODUCER, Role.ADMIN))]
