"""The admin dashboard: server-rendered pages under ``/ui`` to see and steer the queue."""

from queuelog.dashboard.routes import dashboard_router

__all__ = ["dashboard_router"]
