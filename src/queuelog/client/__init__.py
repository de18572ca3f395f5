"""The Python SDK: ``Client``, ``AsyncClient`` and the ``Worker`` runtime."""

from queuelog.client.aio import AsyncClient
from queuelog.client.errors import BodyTooLarge, ServerError, ServerUnavailable
from queuelog.client.policy import RetryPolicy
from queuelog.client.sync import Client
from queuelog.client.types import Acknowledged, Enqueued, Event, Job, Key, Page

__all__ = [
    "Acknowledged",
    "AsyncClient",
    "BodyTooLarge",
    "Client",
    "Enqueued",
    "Event",
    "Job",
    "Key",
    "Page",
    "RetryPolicy",
    "ServerError",
    "ServerUnavailable",
]
