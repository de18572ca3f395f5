from __future__ import annotations

from queuelog.auth import RateLimiter, display_prefix, generate_key, hash_key, looks_like_key
from queuelog.errors import RateLimited


def test_keys_are_prefixed_random_and_checksummed() -> None:
    keys = {generate_key() for _ in range(200)}
    assert len(keys) == 200
    for key in keys:
        assert key.startswith("ql_") and len(key) == 41 and looks_like_key(key)


def test_a_changed_character_breaks_the_checksum() -> None:
    key = generate_key()
    body = key[3:35]
    flipped = "ql_" + ("A" if body[0] != "A" else "B") + body[1:] + key[35:]
    assert not looks_like_key(flipped)
    assert not looks_like_key(key[:-1])
    assert not looks_like_key("ql_" + "!" * 38)


def test_hash_is_stable_and_hides_the_key() -> None:
    key = generate_key()
    assert hash_key(key) == hash_key(key) and key not in hash_key(key)
    assert display_prefix(key) == key[:9]


def test_rate_limiter_refills_over_time() -> None:
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


def test_rate_zero_turns_the_limiter_off() -> None:
    limiter = RateLimiter(rate=0, burst=1)
    for _ in range(100):
        limiter.check(1)
