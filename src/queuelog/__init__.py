"""queuelog: a durable background job queue served over HTTP.

The package root holds the SDK's public names only; the server lives in ``queuelog.api``
and is imported by ``queuelog serve``, never by ``import queuelog``.
"""

from queuelog._version import __version__
from queuelog.client import (
    AsyncClient,
    BodyTooLarge,
    Client,
    Fail,
    Job,
    JobCancelled,
    JobFailed,
    JobStatus,
    JobTimeout,
    Priority,
    Retry,
    RetryPolicy,
    ServerError,
    ServerUnavailable,
    Snooze,
    Worker,
)

__all__ = [
    "AsyncClient",
    "BodyTooLarge",
    "Client",
    "Fail",
    "Job",
    "JobCancelled",
    "JobFailed",
    "JobStatus",
    "JobTimeout",
    "Priority",
    "Retry",
    "RetryPolicy",
    "ServerError",
    "ServerUnavailable",
    "Snooze",
    "Worker",
    "__version__",
]
