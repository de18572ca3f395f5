"""A client's ``timeout`` is checked when the client is made, as its URL and key are."""

from __future__ import annotations

import math

import pytest

from queuelog.client import AsyncClient, Client

URL = "http://127.0.0.1:8000"


@pytest.mark.parametrize("timeout", [0, -1, math.nan, math.inf, True, "5"])
def test_hardening_105_a_timeout_that_is_no_time_to_wait_is_refused_when_the_client_is_made(
    timeout: object,
) -> None:
    # Else nan and inf raised ValueError and OverflowError from inside each call, and 0 or
    # less gave every request a deadline of a millisecond.
    for client in (Client, AsyncClient):
        with pytest.raises(ValueError, match="timeout"):
            client(URL, "ql_x", timeout=timeout)  # type: ignore[arg-type]
    with Client(URL, "ql_x") as made, pytest.raises(ValueError, match="timeout"):
        made.with_options(timeout=timeout, retry_policy=made.retry_policy)  # type: ignore[arg-type]


@pytest.mark.parametrize("timeout", [0.001, 2, 10.5, 3600])
def test_a_timeout_of_some_seconds_makes_a_client(timeout: float) -> None:
    with Client(URL, "ql_x", timeout=timeout) as client:
        assert client.connection.timeout == timeout
