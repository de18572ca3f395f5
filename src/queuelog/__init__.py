"""queuelog: a durable background job queue served over HTTP.

The package root holds the SDK's public names only; the server lives in ``queuelog.api``
and is imported by ``queuelog serve``, never by ``import queuelog``.
"""

from queuelog._version import __version__
from queuelog.client import (
    AsyncClient,
    Client,
    Fail,
    Job,
    Retry,
    RetryPolicy,
    ServerUnavailable,
    Snooze,
    Worker,
)

__all__ = [
    "AsyncClient",
    "Client",
    "Fail",
    "Job",
    "Retry",
    "RetryPolicy",
    "ServerUnavailable",
    "Snooze",
    "Worker",
    "__version__",
]
