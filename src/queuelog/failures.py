"""How an unexpected failure is logged: one line naming the request and the exception,
then a bounded traceback, so a flood of failing requests cannot flood the log."""

from __future__ import annotations

import logging
import traceback

TRACEBACK_FRAMES = 20
TRACEBACK_CHARS = 16 * 1024
_LOGGED_PATH_CHARS = 200


def log_internal_error(logger: logging.Logger, exc: BaseException, method: str, path: str) -> None:
    """Log an unexpected failure as one line naming the request and the exception,
    followed by a bounded traceback (its innermost frames)."""
    lines = traceback.format_exception(exc, limit=-TRACEBACK_FRAMES)
    text = "".join(lines)[-TRACEBACK_CHARS:]
    logger.error(
        "internal error on %s %s: %s\n%s",
        method,
        path[:_LOGGED_PATH_CHARS],
        type(exc).__name__,
        text.rstrip("\n"),
    )
