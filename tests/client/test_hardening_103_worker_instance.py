"""A Worker's ``instance`` is checked when the worker is made, as its other claim options."""

from __future__ import annotations

import pytest

from queuelog.client import Worker


@pytest.mark.parametrize("instance", ["host 1", "a" * 65, "mail/1", "é", "x\n", 7])
def test_hardening_103_an_instance_the_server_refuses_is_refused_when_the_worker_is_made(
    instance: object,
) -> None:
    # Else the worker starts, and its first claim is refused 422 without naming the option.
    with pytest.raises(ValueError, match="instance"):
        Worker(instance=instance)  # type: ignore[arg-type]


@pytest.mark.parametrize("instance", ["host-1", "a" * 64, "mail.example_2", None, ""])
def test_an_instance_the_server_takes_makes_a_worker(instance: str | None) -> None:
    Worker(instance=instance)
