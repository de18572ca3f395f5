"""queuelog: a durable background job queue served over HTTP."""

__version__ = "0.1.0"
