"""The HTTP API: routes parse and authenticate, the service decides."""
