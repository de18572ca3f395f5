"""API keys: generation, hashing, checking, and the role -> permission table."""

from __future__ import annotations

import hashlib
import hmac
import math
import re
import secrets
import threading
import time
import zlib
from collections.abc import Callable
from typing import Any

from queuelog.clock import Clock, rfc3339
from queuelog.errors import (
    NotFound,
    RateLimited,
    StorageUnavailable,
    Unauthenticated,
    ValidationFailed,
    quoted,
)
from queuelog.models import ApiKey, Priority, Role
from queuelog.schedules import PRINCIPAL_PREFIX
from queuelog.storage.protocol import NewKey, Storage

KEY_PREFIX = "ql_"
# A key's name is the principal and the worker id's first part (before "/instance").
KEY_NAME_CHARS = "A-Z a-z 0-9 . _ : @ -"
KEY_NAME = re.compile(r"[A-Za-z0-9._:@-]{1,64}")
_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_BODY_CHARS = 32  # 32 base62 characters: about 190 bits of randomness
_CHECK_CHARS = 6
# The whole shape in one match (every request presents a key): ASCII letters and digits only.
_KEY_SHAPE = re.compile(f"{KEY_PREFIX}[0-9A-Za-z]{{{_BODY_CHARS + _CHECK_CHARS}}}")
_KEY_LENGTH = len(KEY_PREFIX) + _BODY_CHARS + _CHECK_CHARS


def _base62(number: int, width: int) -> str:
    chars = []
    for _ in range(width):
        number, rem = divmod(number, 62)
        chars.append(_ALPHABET[rem])
    return "".join(reversed(chars))


def _checksum(body: str) -> str:
    return _base62(zlib.crc32(body.encode()), _CHECK_CHARS)


def generate_key() -> str:
    """A new key: ``ql_`` + 32 random base62 characters + a 6-character CRC32 checksum.

    The checksum lets a leaked key be recognised offline (by a secret scanner)
    without a database lookup.
    """
    body = "".join(secrets.choice(_ALPHABET) for _ in range(_BODY_CHARS))
    return f"{KEY_PREFIX}{body}{_checksum(body)}"


def looks_like_key(key: str) -> bool:
    """True when ``key`` has the shape of a queuelog key and its checksum matches."""
    if _KEY_SHAPE.fullmatch(key) is None:
        return False
    rest = key[len(KEY_PREFIX) :]
    body, check = rest[:_BODY_CHARS], rest[_BODY_CHARS:]
    return hmac.compare_digest(_checksum(body), check)


def hash_key(key: str) -> str:
    """Stored form of a key. Keys carry ~190 random bits, so a fast hash is enough."""
    return hashlib.sha256(key.encode()).hexdigest()


def display_prefix(key: str) -> str:
    """The part of a key that may be shown again to tell keys apart."""
    return key[: len(KEY_PREFIX) + 6]


def _new_key(
    name: str, roles: frozenset[Role], max_priority: Priority, types: tuple[str, ...] | None
) -> tuple[NewKey, str]:
    plaintext = generate_key()
    new = NewKey(
        name=name,
        roles=roles,
        max_priority=max_priority,
        types=types,
        key_hash=hash_key(plaintext),
        prefix=display_prefix(plaintext),
    )
    return new, plaintext


class KeyRing:
    """Creates, lists, revokes and checks API keys, with a short-lived lookup cache.

    A key revoked through this process stops working at once; one revoked by
    another node stops within ``ttl`` seconds.
    """

    def __init__(self, storage: Storage, clock: Clock, ttl: float = 1.0) -> None:
        self._storage = storage
        self._clock = clock
        self._ttl = ttl
        self._cache: dict[str, tuple[float, ApiKey | None]] = {}
        self._generation = 0  # bumped by every revoke
        self._lock = threading.Lock()

    async def create(
        self,
        name: str,
        roles: frozenset[Role],
        max_priority: Priority = Priority.MEDIUM,
        types: tuple[str, ...] | None = None,
    ) -> tuple[ApiKey, str]:
        """Store a new key; return it with its plaintext, which is never shown again."""
        if not roles:
            raise ValidationFailed("A key needs at least one role")
        if not KEY_NAME.fullmatch(name):
            raise ValidationFailed(f"A key name is 1-64 of {KEY_NAME_CHARS}")
        if name.startswith(PRINCIPAL_PREFIX):
            # The schedules' principals: a key of that name would see their jobs.
            raise ValidationFailed(f"A key name may not start with {quoted(PRINCIPAL_PREFIX)}")
        if types is not None:
            types = tuple(dict.fromkeys(types))  # each once, in the order given
        new, plaintext = _new_key(name, roles, max_priority, types)
        return await self._storage.key_insert(new, self._clock.now()), plaintext

    async def bootstrap_admin(self) -> str | None:
        """Create an admin key if no active one exists; its plaintext, or None.

        Atomic in the storage: nodes starting together on an empty database
        create one key between them, not one each.
        """
        new, plaintext = _new_key("admin", frozenset({Role.ADMIN}), Priority.CRITICAL, None)
        created = await self._storage.key_insert_first_admin(new, self._clock.now())
        return plaintext if created is not None else None

    async def list(self) -> list[ApiKey]:
        return await self._storage.key_list()

    async def revoke(self, key_id: int) -> None:
        if not await self._storage.key_revoke(key_id, self._clock.now()):
            raise NotFound("No such active key")
        with self._lock:
            self._cache.clear()
            self._generation += 1

    async def authenticate(self, presented: str | None, during_fault: bool = False) -> ApiKey:
        """The active key for a presented secret, or Unauthenticated.

        A secret seen within ``ttl`` is answered from the cache by its digest alone;
        its shape and checksum were checked when it was first looked up. Only a
        secret of a key's length and characters is hashed at all. With
        ``during_fault``, a key this node last found active is still taken while the
        database cannot be read (StorageUnavailable otherwise, as without it).
        """
        if not presented or len(presented) != _KEY_LENGTH or not presented.isascii():
            raise Unauthenticated("A valid API key is required")
        digest = hash_key(presented)
        try:
            key = await self._by_digest(digest, may_read=looks_like_key(presented))
        except StorageUnavailable:
            if not during_fault:
                raise
            key = self._last_found(digest)
        if key is None or key.revoked_at is not None:
            raise Unauthenticated("A valid API key is required")
        if not hmac.compare_digest(key.key_hash, digest):
            raise Unauthenticated("A valid API key is required")
        return key

    async def still_active(self, key: ApiKey) -> bool:
        """Whether ``key``, authenticated earlier, may still be used: a request that
        waited (a long poll) asks before it answers. As fresh as ``authenticate``: a
        revoke on this node counts at once, on another within ``ttl``."""
        found = await self._by_digest(key.key_hash, may_read=True)
        return found is not None and found.revoked_at is None

    def _last_found(self, digest: str) -> ApiKey:
        """The key of ``digest`` as last read, however long ago; StorageUnavailable if
        none was (a revoke on this node forgets them all)."""
        with self._lock:
            hit = self._cache.get(digest)
        if hit is None or hit[1] is None:
            raise StorageUnavailable("The database cannot be read to check the key")
        return hit[1]

    async def _by_digest(self, digest: str, may_read: bool) -> ApiKey | None:
        """The key of ``digest`` from the cache while fresh, else read (if ``may_read``)."""
        stamp = time.monotonic()
        with self._lock:
            hit = self._cache.get(digest)
            generation = self._generation
        if hit is not None and stamp - hit[0] < self._ttl:
            return hit[1]
        return await self._lookup(digest, stamp, generation) if may_read else None

    async def _lookup(self, digest: str, stamp: float, generation: int) -> ApiKey | None:
        """Read the key by its digest and cache what was found (or that none was)."""
        key = await self._storage.key_by_hash(digest)
        with self._lock:
            # A revoke since the read began may have made ``key`` stale: do not keep it.
            if generation == self._generation:
                if len(self._cache) > 10_000:
                    self._cache.clear()
                self._cache[digest] = (stamp, key)
        return key


class RateLimiter:
    """A token bucket per key: ``rate`` tokens a second, up to ``burst``; rate 0 is off."""

    def __init__(self, rate: float, burst: int, monotonic: Callable[[], float] = time.monotonic):
        self._rate = rate
        self._burst = burst
        self._monotonic = monotonic
        self._buckets: dict[int, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def check(self, key_id: int) -> None:
        """Take one token for ``key_id`` or raise RateLimited with the seconds to wait."""
        if self._rate <= 0:
            return
        now = self._monotonic()
        with self._lock:
            tokens, last = self._buckets.get(key_id, (float(self._burst), now))
            tokens = min(float(self._burst), tokens + (now - last) * self._rate)
            if tokens < 1:
                self._buckets[key_id] = (tokens, now)
                raise RateLimited(retry_after=max(1, math.ceil((1 - tokens) / self._rate)))
            self._buckets[key_id] = (tokens - 1, now)


def key_json(key: ApiKey) -> dict[str, Any]:
    """A key as the API and `queuelog keys list --json` show it: never its secret."""
    return {
        "id": key.id,
        "name": key.name,
        "roles": sorted(r.value for r in key.roles),
        "max_priority": key.max_priority.label,
        "types": list(key.types) if key.types is not None else None,
        "prefix": key.prefix,
        "created_at": rfc3339(key.created_at),
        "revoked_at": rfc3339(key.revoked_at) if key.revoked_at else None,
    }
