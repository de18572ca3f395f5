"""``Prefer`` (RFC 7240) as ``POST /jobs/batch/complete`` reads it."""

from __future__ import annotations

import pytest

from queuelog.api.routes.claims import prefers_minimal


@pytest.mark.parametrize(
    "values",
    [
        ["return=minimal"],
        ['Return = "minimal"'],
        ["respond-async, return=minimal"],
        ["return=minimal; extra=1"],
        ["wait=5", "return=minimal"],
        ['handling=lenient; note="a, b", return=minimal'],
        ['return="mini\\mal"'],
    ],
)
def test_return_minimal_is_found_wherever_it_is_said(values: list[str]) -> None:
    assert prefers_minimal(values)


@pytest.mark.parametrize(
    "values",
    [
        [],
        [""],
        ["return=representation"],
        ["minimal"],
        ["return=minimalist"],
        ["x; return=minimal"],
        ['foo="a,return=minimal"'],
        ['return="minimal;x"'],
        ['return=minimal"'],
        ['return=""minimal'],
        ["return=representation, return=minimal"],  # the first instance counts
        ["return=representation", "return=minimal"],
    ],
)
def test_anything_else_keeps_the_full_answer(values: list[str]) -> None:
    assert not prefers_minimal(values)
