"""Mounts for the tests that need a filesystem of their own (a small disk, a read-only
folder): they need root, and skip without it; in CI, where they must run, a mount that
cannot be made fails the test instead."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.postgres import in_ci


def mount(args: list[str]) -> subprocess.CompletedProcess[str]:
    """Run ``mount`` or ``umount`` with ``args`` (bounded in time)."""
    return subprocess.run(args, capture_output=True, text=True, timeout=30, check=False)


@contextmanager
def mounted(what: str, args: list[str], where: Path) -> Iterator[Path]:
    """``where`` mounted by ``mount args`` for the block, unmounted after it; ``what`` the
    mount is, said when it cannot be made."""
    if os.geteuid() != 0:
        pytest.skip(f"{what} needs root")
    done = mount(["mount", *args, str(where)])
    if done.returncode != 0:
        reason = f"cannot mount {what}: {done.stderr.strip()}"
        if in_ci():
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    try:
        yield where
    finally:
        mount(["umount", "-l", str(where)])
