"""Client, worker and CLI tests run against a real server process."""

from tests.realserver import real_server

__all__ = ["real_server"]
