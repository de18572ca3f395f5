"""The app's JSONResponse: orjson's body, Starlette's headers."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.responses import JSONResponse as StarletteJSON

from queuelog.api.problems import PROBLEM_JSON
from queuelog.api.responses import JSONResponse


@pytest.mark.parametrize(
    ("status", "headers", "media_type"),
    [
        (200, None, None),
        (201, {"Location": "/jobs/7"}, None),
        (200, {"Preference-Applied": "return=minimal", "X-A": "é"}, None),
        (401, {"WWW-Authenticate": 'Bearer realm="queuelog"'}, PROBLEM_JSON),
        (429, {"Retry-After": "2"}, PROBLEM_JSON),
        (200, {"Content-Type": "application/x-custom"}, None),
        (200, {"content-length": "2"}, None),
        (204, None, None),
        (304, {"ETag": "x"}, None),
    ],
)
def test_the_headers_are_starlette_s(
    status: int, headers: dict[str, str] | None, media_type: str | None
) -> None:
    content: Any = {"id": 7, "payload": {"a": "é"}}
    ours = JSONResponse(content, status_code=status, headers=headers, media_type=media_type)
    theirs = StarletteJSON(content, status_code=status, headers=headers, media_type=media_type)
    assert ours.raw_headers == theirs.raw_headers
