"""An idempotency key given to the SDK is sent as given: an empty one is refused by the
server, never replaced by a new key, which would make every resend a new job."""

from __future__ import annotations

import pytest

from queuelog.client import Client
from queuelog.errors import ValidationFailed
from tests.realserver import RealServer


def test_hardening_88_an_empty_idempotency_key_is_refused_not_replaced(
    real_server: RealServer,
) -> None:
    with Client(real_server.url, real_server.keys["shop"]) as shop:
        before = {job.id for job in shop.list(type="noop")}
        with pytest.raises(ValidationFailed):
            shop.enqueue("noop", {"order": 42}, idempotency_key="")
        with pytest.raises(ValidationFailed):
            shop.enqueue_many([{"type": "noop", "idempotency_key": ""}])
        assert {job.id for job in shop.list(type="noop")} == before
        # Not given (or None): a new key each, as before.
        made = shop.enqueue_many([{"type": "noop"}, {"type": "noop", "idempotency_key": None}])
        assert all(item.created and item.job.idempotency_key for item in made)
