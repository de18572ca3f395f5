from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from queuelog.auth import (
    KeyRing,
    RateLimiter,
    display_prefix,
    generate_key,
    hash_key,
    looks_like_key,
)
from queuelog.clock import FakeClock
from queuelog.errors import RateLimited, Unauthenticated
from queuelog.models import ApiKey, Role
from queuelog.storage.sqlite.store import SqliteStorage

pytestmark = pytest.mark.anyio


async def test_keys_are_prefixed_random_and_checksummed() -> None:
    keys = {generate_key() for _ in range(200)}
    assert len(keys) == 200
    for key in keys:
        assert key.startswith("ql_") and len(key) == 41 and looks_like_key(key)


async def test_a_changed_character_breaks_the_checksum() -> None:
    key = generate_key()
    body = key[3:35]
    flipped = "ql_" + ("A" if body[0] != "A" else "B") + body[1:] + key[35:]
    assert not looks_like_key(flipped)
    assert not looks_like_key(key[:-1])
    assert not looks_like_key("ql_" + "!" * 38)
    assert not looks_like_key(key + "\n") and not looks_like_key(key[:-1] + "\n")
    assert not looks_like_key(key[:-1] + "\u0663")  # a digit, but not an ASCII one


async def test_hash_is_stable_and_hides_the_key() -> None:
    key = generate_key()
    assert hash_key(key) == hash_key(key) and key not in hash_key(key)
    assert display_prefix(key) == key[:9]


async def test_rate_limiter_refills_over_time() -> None:
    now = [0.0]
    limiter = RateLimiter(rate=2, burst=2, monotonic=lambda: now[0])
    limiter.check(1)
    limiter.check(1)
    try:
        limiter.check(1)
    except RateLimited as exc:
        assert exc.retry_after == 1
    else:
        raise AssertionError("third request should be limited")
    limiter.check(2)  # another key has its own bucket
    now[0] = 0.5
    limiter.check(1)


async def test_rate_zero_turns_the_limiter_off() -> None:
    limiter = RateLimiter(rate=0, burst=1)
    for _ in range(100):
        limiter.check(1)


async def test_a_lookup_racing_a_revoke_is_not_cached(tmp_path: Path) -> None:
    storage = SqliteStorage(tmp_path / "k.db")
    ring = KeyRing(storage, FakeClock(), ttl=60)
    key, plaintext = await ring.create("mallory", frozenset({Role.PRODUCER}))
    real_read = storage.key_by_hash

    async def read_then_revoke(digest: str) -> ApiKey | None:
        found = await real_read(digest)  # read while the key is still active...
        await ring.revoke(key.id)  # ...and the revoke lands before the read is cached
        return found

    storage.key_by_hash = read_then_revoke  # type: ignore[method-assign]
    await ring.authenticate(plaintext)  # the request already in flight goes through
    storage.key_by_hash = real_read  # type: ignore[method-assign]
    with pytest.raises(Unauthenticated):
        await ring.authenticate(plaintext)
    storage.close()


@pytest.fixture
def keys(tmp_path: Path) -> Iterator[tuple[KeyRing, list[str]]]:
    """A key ring whose storage records every key read (by digest) in the list."""
    storage = SqliteStorage(tmp_path / "k.db")
    reads: list[str] = []
    real_read = storage.key_by_hash

    async def counted(digest: str) -> ApiKey | None:
        reads.append(digest)
        return await real_read(digest)

    storage.key_by_hash = counted  # type: ignore[method-assign]
    yield KeyRing(storage, FakeClock(), ttl=60), reads
    storage.close()


async def test_a_key_seen_within_the_ttl_is_answered_without_a_read(
    keys: tuple[KeyRing, list[str]],
) -> None:
    ring, reads = keys
    key, plaintext = await ring.create("p", frozenset({Role.PRODUCER}))
    assert (await ring.authenticate(plaintext)).id == key.id
    assert (await ring.authenticate(plaintext)).id == key.id
    assert reads == [hash_key(plaintext)]
    unknown = generate_key()  # well formed, never stored: the miss is cached too
    for _ in range(2):
        with pytest.raises(Unauthenticated):
            await ring.authenticate(unknown)
    assert reads == [hash_key(plaintext), hash_key(unknown)]


async def test_a_secret_that_is_not_a_key_is_refused_without_a_read(
    keys: tuple[KeyRing, list[str]],
) -> None:
    ring, reads = keys
    _, plaintext = await ring.create("p", frozenset({Role.PRODUCER}))
    broken = plaintext[:-1] + ("A" if plaintext[-1] != "A" else "B")  # checksum fails
    not_keys = [broken, plaintext[:-1], plaintext + "x", plaintext[:-1] + "\u0663", "", "\ud800"]
    for presented in not_keys * 2:
        with pytest.raises(Unauthenticated):
            await ring.authenticate(presented)
    assert reads == []
