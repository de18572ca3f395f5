"""The package's optional parts (its pip extras) and the modules each brings.

``pip install queuelog`` is the SDK and the client commands; a command that needs an
extra asks ``installed`` first, so its absence is one clear line, not a traceback.
Nothing here imports the modules it names.
"""

from __future__ import annotations

import importlib.util

EXTRA_MODULES = {
    "server": (
        "fastapi",
        "uvicorn",
        "pydantic",
        "jsonschema",
        "re2",
        "referencing",
        "orjson",
        "prometheus_client",
        "jinja2",
        "swagger_ui_bundle",
        "cronsim",
    ),
    "postgres": ("psycopg", "psycopg_pool"),
    "otel": ("opentelemetry.trace", "opentelemetry.instrumentation.asgi"),
}


def installed(extra: str) -> bool:
    """Whether every module of ``extra`` can be imported (none is imported here)."""
    return all(_found(module) for module in EXTRA_MODULES[extra])


def _found(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package of a dotted name is missing
        return False
