"""Backoff for retried jobs: pure functions."""

from __future__ import annotations

import random


def backoff_seconds(
    retry_count: int,
    base: float,
    cap: float,
    jitter: float = 0.2,
    rng: random.Random | None = None,
) -> float:
    """Delay before the next attempt: ``min(cap, base * 2**retry_count)`` with ±jitter.

    Args:
        retry_count: retries already made (0 for the first failure).
        base: delay after the first failure, in seconds.
        cap: the longest delay, in seconds.
        jitter: the fraction by which the delay is spread either way.
        rng: source of randomness; tests pass a seeded one.
    """
    exponent = min(retry_count, 62)
    delay: float = min(cap, base * float(2**exponent))
    spread = (rng or random).uniform(1 - jitter, 1 + jitter)
    return max(0.0, delay * spread)
