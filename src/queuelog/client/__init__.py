"""The Python SDK: ``Client``, ``AsyncClient`` and the ``Worker`` runtime."""

from queuelog.client.aio import AsyncClient
from queuelog.client.calls import enqueue_body
from queuelog.client.errors import (
    BodyTooLarge,
    JobCancelled,
    JobFailed,
    JobNotCompleted,
    JobTimeout,
    ServerError,
    ServerUnavailable,
)
from queuelog.client.outcome import Fail, Retry, Snooze
from queuelog.client.policy import RetryPolicy
from queuelog.client.sync import Client
from queuelog.client.types import (
    Acknowledged,
    Dependency,
    Enqueued,
    Event,
    EventPage,
    Job,
    JobType,
    Key,
    Page,
    Schedule,
)
from queuelog.client.worker import Worker
from queuelog.models import JobStatus, Priority

__all__ = [
    "Acknowledged",
    "AsyncClient",
    "BodyTooLarge",
    "Client",
    "Dependency",
    "Enqueued",
    "Event",
    "EventPage",
    "Fail",
    "Job",
    "JobCancelled",
    "JobFailed",
    "JobNotCompleted",
    "JobStatus",
    "JobTimeout",
    "JobType",
    "Key",
    "Page",
    "Priority",
    "Retry",
    "RetryPolicy",
    "Schedule",
    "ServerError",
    "ServerUnavailable",
    "Snooze",
    "Worker",
    "enqueue_body",
]
