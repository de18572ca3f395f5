"""``[server] otel`` (``queuelog serve --otel``): every request in a SERVER span made by
OpenTelemetry's ASGI instrumentation (the ``otel`` extra), the child of the caller's W3C
``traceparent``. The spans go to the process's tracer provider (set up, for instance, by
``opentelemetry-instrument``); without one they are OpenTelemetry's no-op.

Only their names are queuelog's: ``{method} {route}``, the route's template as the
metrics name it (``POST /jobs/{job_id}/complete``), so a job id never makes a span name
of its own. The router finds the route after the span has begun, so ``RouteName``, just
inside the instrumentation, renames the span as the answer starts.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from opentelemetry import trace
from starlette.types import Message, Receive, Scope, Send

from queuelog.api.middleware import HttpMiddleware

# Load balancers' probes, every few seconds: not worth a span each.
_UNTRACED_URLS = "/healthz,/readyz"


def install_request_spans(app: FastAPI) -> None:
    """Add the instrumentation outermost, so a request's span covers all the rest."""
    from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware

    app.add_middleware(RouteName)
    app.add_middleware(
        OpenTelemetryMiddleware,
        default_span_details=_method_alone,
        excluded_urls=_UNTRACED_URLS,
        # A span per request; none for each of its ASGI messages.
        exclude_spans=["receive", "send"],
    )


def _method_alone(scope: Scope) -> tuple[str, dict[str, Any]]:
    """The span's name until its route is known: the method, as the conventions say."""
    return str(scope.get("method") or "HTTP"), {}


class RouteName(HttpMiddleware):
    """Names the request's span ``{method} {route}`` once the router has matched it."""

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        span = trace.get_current_span()

        async def named(message: Message) -> None:
            route = getattr(scope.get("route"), "path_format", None)
            if message["type"] == "http.response.start" and route:
                span.update_name(f"{scope['method']} {route}")
                span.set_attribute("http.route", route)
            await send(message)

        await self.app(scope, receive, named)
