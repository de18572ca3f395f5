"""``Prefer`` (RFC 7240) as ``POST /jobs/batch/complete`` reads it."""

from __future__ import annotations

import time

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


@pytest.mark.parametrize("hostile", ['"\\' * 30_000, '"' * 60_000, 'return="' + "\\a" * 30_000])
def test_a_hostile_header_costs_about_what_a_plain_one_of_its_size_does(hostile: str) -> None:
    def cost(value: str) -> float:
        runs = []
        for _ in range(3):
            started = time.perf_counter()
            prefers_minimal([value])
            runs.append(time.perf_counter() - started)
        return min(runs)

    plain = cost("a" * len(hostile))
    # Linear in the header's length either way; a rescan per quote would be thousands of times.
    assert cost(hostile) < 50 * max(plain, 1e-4)
