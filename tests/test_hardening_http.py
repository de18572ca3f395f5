"""Findings of the live attack review (issue 19) about HTTP itself, one test (or more)
per finding: 3, slow and huge request heads; 10, slash redirects.

The request-head tests run a real ``queuelog serve`` on 127.0.0.1: the limits they
check live in the HTTP server, not in the app.
"""

from __future__ import annotations

import pytest

from tests.conftest import Api


@pytest.mark.parametrize("method", ["POST", "GET"])
def test_h10_a_trailing_slash_is_404_not_a_redirect_to_the_host_header(
    producer: Api, method: str
) -> None:
    response = producer.request(
        method,
        "/jobs/",
        json={"type": "noop"},
        headers={"Host": "evil.example"},
        follow_redirects=False,
    )
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["type"] == "not-found"
    assert "location" not in response.headers
