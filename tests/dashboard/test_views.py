"""Presentation helpers: durations and the throughput chart's geometry."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from queuelog.dashboard.views import by_type, duration, status_totals, throughput_chart
from queuelog.models import MinuteCounts

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def test_duration_reads_like_a_person_would_say_it() -> None:
    assert duration(None) == "-"
    assert duration(12.7) == "12 s"
    assert duration(-65) == "1 min 5 s"
    assert duration(3 * 3600 + 120) == "3 h 2 min"


def test_chart_stacks_failed_on_completed_scaled_to_the_busiest_minute() -> None:
    slots = [MinuteCounts(T0 + timedelta(minutes=i)) for i in range(4)]
    slots[1].completed, slots[1].failed = 3, 1
    slots[3].completed = 2
    chart = throughput_chart(slots, width=400, height=100)
    assert chart.peak == 4 and chart.total_completed == 5 and chart.total_failed == 1
    busy = chart.bars[1]
    assert busy.completed_height == 75 and busy.completed_y == 25
    assert busy.failed_height == 25 and busy.failed_y == 0
    assert chart.bars[0].completed_height == 0 and chart.bars[0].failed_height == 0
    assert [b.x for b in chart.bars] == [1, 101, 201, 301]
    assert chart.first_label == "12:00" and chart.last_label == "12:03"
    assert busy.title == "12:01: 3 completed, 1 failed"


def test_an_empty_hour_draws_flat_bars() -> None:
    chart = throughput_chart([MinuteCounts(T0)])
    assert chart.peak == 1 and chart.bars[0].completed_height == 0


def test_counts_by_status_and_type_list_every_status() -> None:
    counts = {("pending", "b"): 2, ("failed", "a"): 1, ("pending", "a"): 3}
    assert status_totals(counts) == {
        "waiting": 0,
        "pending": 5,
        "running": 0,
        "completed": 0,
        "failed": 1,
        "cancelled": 0,
    }
    table = by_type(counts)
    assert list(table) == ["a", "b"]
    zero = {"waiting": 0, "running": 0, "completed": 0, "cancelled": 0}
    assert table["a"] == {**zero, "pending": 3, "failed": 1}
