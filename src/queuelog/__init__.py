"""queuelog: a durable background job queue served over HTTP."""

__version__ = "0.1.0"

# The SDK: imported after __version__, which the client sends as its User-Agent.
from queuelog.client import (
    AsyncClient,
    Client,
    Fail,
    Job,
    Retry,
    RetryPolicy,
    ServerUnavailable,
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
    "Worker",
    "__version__",
]
