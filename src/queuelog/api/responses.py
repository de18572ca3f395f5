"""JSON answers rendered by orjson, with Starlette's own headers.

orjson refuses integers beyond 64 bits, which a job's payload may carry: those
answers are rendered by the standard encoder instead, to the same compact UTF-8.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
from fastapi import responses


class JSONResponse(responses.JSONResponse):
    def render(self, content: Any) -> bytes:
        try:
            return orjson.dumps(content)
        except TypeError:
            return json.dumps(content, ensure_ascii=False, separators=(",", ":")).encode()
