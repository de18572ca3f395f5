"""Fire times of a schedule's cadence, on fixed dates: cron, every_seconds, time zones,
and both daylight-saving changes of Europe/Paris."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from queuelog.config import ConfigError, Settings, load_settings
from queuelog.schedules import PUBLISHED_SCHEDULE_NAME, Cadence, CadenceError, schedule_name_error
from tests.realserver import toml_text


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def fires(cadence: Cadence, after: datetime, count: int) -> list[datetime]:
    out = []
    for _ in range(count):
        after = cadence.next_after(after)
        out.append(after)
    return out


def test_every_seconds_is_a_grid_from_the_epoch() -> None:
    cadence = Cadence.parse(None, 300, "UTC")
    assert cadence.next_after(utc(2026, 5, 1, 10, 1, 7)) == utc(2026, 5, 1, 10, 5)
    # On a grid point, the next one.
    assert cadence.next_after(utc(2026, 5, 1, 10, 5)) == utc(2026, 5, 1, 10, 10)
    assert cadence.latest_at_or_before(utc(2026, 5, 1, 10, 9, 59)) == utc(2026, 5, 1, 10, 5)
    assert cadence.latest_at_or_before(utc(2026, 5, 1, 10, 10)) == utc(2026, 5, 1, 10, 10)


def test_every_seconds_ignores_the_time_zone() -> None:
    paris = Cadence.parse(None, 7, "Europe/Paris")
    plain = Cadence.parse(None, 7, "UTC")
    start = utc(2026, 3, 29, 0, 59, 58)
    assert fires(paris, start, 5) == fires(plain, start, 5)


def test_cron_in_utc() -> None:
    cadence = Cadence.parse("*/15 * * * *", None, "UTC")
    assert fires(cadence, utc(2026, 5, 1, 10, 1), 3) == [
        utc(2026, 5, 1, 10, 15),
        utc(2026, 5, 1, 10, 30),
        utc(2026, 5, 1, 10, 45),
    ]
    assert cadence.latest_at_or_before(utc(2026, 5, 1, 10, 44, 59)) == utc(2026, 5, 1, 10, 30)
    assert cadence.latest_at_or_before(utc(2026, 5, 1, 10, 45)) == utc(2026, 5, 1, 10, 45)


def test_cron_is_read_in_its_time_zone() -> None:
    # 03:00 in Paris is 01:00 UTC in winter and 02:00 UTC in summer.
    cadence = Cadence.parse("0 3 * * *", None, "Europe/Paris")
    assert cadence.next_after(utc(2026, 1, 10, 12)) == utc(2026, 1, 11, 2)
    assert cadence.next_after(utc(2026, 7, 10, 12)) == utc(2026, 7, 11, 1)
    tokyo = Cadence.parse("0 9 * * 1", None, "Asia/Tokyo")  # Mondays 09:00 JST
    assert tokyo.next_after(utc(2026, 6, 3)) == utc(2026, 6, 8, 0)


def test_spring_forward_skips_the_wall_time_that_does_not_exist() -> None:
    # Europe/Paris, 2026-03-29: 02:00 CET becomes 03:00 CEST; 02:30 never happens.
    cadence = Cadence.parse("30 2 * * *", None, "Europe/Paris")
    assert fires(cadence, utc(2026, 3, 27, 12), 3) == [
        utc(2026, 3, 28, 1, 30),  # 02:30 CET
        utc(2026, 3, 30, 0, 30),  # no fire on the 29th; 02:30 CEST on the 30th
        utc(2026, 3, 31, 0, 30),
    ]
    assert cadence.latest_at_or_before(utc(2026, 3, 30, 0, 0)) == utc(2026, 3, 28, 1, 30)


def test_spring_forward_keeps_the_times_around_the_gap() -> None:
    cadence = Cadence.parse("*/30 * * * *", None, "Europe/Paris")
    # 01:30 CET is 00:30 UTC; the next wall times that exist are 03:00 and 03:30 CEST.
    assert fires(cadence, utc(2026, 3, 29, 0, 0), 3) == [
        utc(2026, 3, 29, 0, 30),
        utc(2026, 3, 29, 1, 0),
        utc(2026, 3, 29, 1, 30),
    ]


def test_fall_back_fires_a_repeated_wall_time_once() -> None:
    # Europe/Paris, 2026-10-25: 03:00 CEST becomes 02:00 CET; 02:00-02:59 happen twice.
    cadence = Cadence.parse("30 2 * * *", None, "Europe/Paris")
    assert fires(cadence, utc(2026, 10, 24, 12), 2) == [
        utc(2026, 10, 25, 0, 30),  # the first 02:30 (CEST); the second one does not fire
        utc(2026, 10, 26, 1, 30),  # 02:30 CET the next day
    ]
    # Asked during the second 02:30 hour, the next fire is the next day's.
    assert cadence.next_after(utc(2026, 10, 25, 1, 10)) == utc(2026, 10, 26, 1, 30)
    assert cadence.latest_at_or_before(utc(2026, 10, 25, 1, 45)) == utc(2026, 10, 25, 0, 30)


def test_fall_back_every_quarter_hour_through_the_repeated_hour() -> None:
    cadence = Cadence.parse("*/15 * * * *", None, "Europe/Paris")
    times = fires(cadence, utc(2026, 10, 24, 23, 50), 9)
    assert times == [
        utc(2026, 10, 25, 0, 0),  # 02:00 CEST
        utc(2026, 10, 25, 0, 15),
        utc(2026, 10, 25, 0, 30),
        utc(2026, 10, 25, 0, 45),
        # 02:00-02:45 CET would repeat those wall times: skipped; 03:00 CET is next.
        utc(2026, 10, 25, 2, 0),
        utc(2026, 10, 25, 2, 15),
        utc(2026, 10, 25, 2, 30),
        utc(2026, 10, 25, 2, 45),
        utc(2026, 10, 25, 3, 0),
    ]
    assert len(set(times)) == len(times)


def test_fall_back_a_late_fire_makes_up_the_latest_fire_of_the_first_pass() -> None:
    # At 01:10 UTC the clock shows 02:10 CET for the second time; 02:30 CEST (00:30 UTC)
    # has been shown already and is the latest fire, though its wall time is later.
    cadence = Cadence.parse("*/30 * * * *", None, "Europe/Paris")
    assert cadence.latest_at_or_before(utc(2026, 10, 25, 1, 10)) == utc(2026, 10, 25, 0, 30)
    assert cadence.latest_at_or_before(utc(2026, 10, 25, 0, 59)) == utc(2026, 10, 25, 0, 30)
    assert cadence.latest_at_or_before(utc(2026, 10, 25, 2, 0)) == utc(2026, 10, 25, 2, 0)
    # Every fire time next_after gives is its own latest; none comes from the second pass.
    for fire in fires(cadence, utc(2026, 10, 24, 23, 0), 12):
        assert cadence.latest_at_or_before(fire) == fire


@pytest.mark.parametrize(
    ("cron", "every", "timezone", "field"),
    [
        ("0 3 * * *", 60, "UTC", "cron"),
        (None, None, "UTC", "cron"),
        ("0 3 * * * *", None, "UTC", "cron"),
        ("0 3 * *", None, "UTC", "cron"),
        ("61 * * * *", None, "UTC", "cron"),
        ("not cron at all", None, "UTC", "cron"),
        (None, 0, "UTC", "every_seconds"),
        ("0 3 * * *", None, "Mars/Olympus", "timezone"),
        ("0 3 * * *", None, "../../etc/passwd", "timezone"),
        (None, 10, "", "timezone"),
    ],
)
def test_bad_cadences_name_their_field(
    cron: str | None, every: int | None, timezone: str, field: str
) -> None:
    with pytest.raises(CadenceError) as caught:
        Cadence.parse(cron, every, timezone)
    assert caught.value.field == field
    assert str(caught.value).startswith(field + ": ")


@pytest.mark.parametrize(
    ("name", "schedule", "problem"),
    [
        ("Nightly", {"cron": "0 3 * * *"}, "schedules.Nightly: a schedule name is 1-64 of"),
        ("n", {"cron": "0 3 * * *", "timezone": "Nowhere/City"}, "schedules.n.timezone: unknown"),
        ("n", {"cron": "0 3 * * *", "type": "gone"}, "schedules.n.type: job type 'gone' is not"),
        ("n", {"cron": "0 3 * * *", "every_seconds": 5}, "schedules.n.cron: give either cron"),
        ("n", {"cron": "0 3 * *"}, "schedules.n.cron: must have five fields"),
        ("n", {"every_seconds": 0}, "schedules.n.every_seconds: Input should be greater"),
        ("n", {"every_seconds": 5, "priority": "urgent"}, "schedules.n.priority: unknown priority"),
        ("n", {"every_seconds": 5, "colour": "red"}, "schedules.n.colour: Extra inputs"),
    ],
)
def test_a_bad_config_schedule_is_one_line_naming_it(
    name: str, schedule: dict[str, object], problem: str, tmp_path: Path
) -> None:
    path = tmp_path / "q.toml"
    path.write_text(
        toml_text({"types": {"noop": {}}, "schedules": {name: {"type": "noop", **schedule}}})
    )
    with pytest.raises(ConfigError) as refused:
        load_settings(path, environ={})
    line = str(refused.value)
    assert line.startswith(problem), line
    assert "\n" not in line


def test_hardening_18_a_config_schedule_named_a_dot_segment_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "q.toml"
    path.write_text('[types.noop]\n[schedules.".."]\ntype = "noop"\nevery_seconds = 60\n')
    with pytest.raises(ConfigError) as refused:
        load_settings(path, environ={})
    assert str(refused.value) == "schedules...: a schedule name is not . or .. " + (
        "(its routes could not be reached)"
    )


NAMES = [".", "..", "...", ".a", "a.", "..a", "a..", "-", "_", "a" * 64, "a" * 65, ""]
NAMES += ["." + "a" * 63, "." + "a" * 64, ".." + "a" * 62, ".." + "a" * 63, "A", "a/b"]


@pytest.mark.parametrize("name", NAMES)
def test_the_published_name_pattern_refuses_what_the_config_refuses(name: str) -> None:
    # The API validates by the published pattern, the config by schedule_name_error.
    published = re.fullmatch(PUBLISHED_SCHEDULE_NAME.strip("^$"), name) is not None
    assert published == (schedule_name_error(name) is None)


@pytest.mark.parametrize("cron", ["30 2 * 3 0L", "* 2 * 3 0L"])
def test_hardening_12_a_cron_matching_only_a_skipped_hour_matches_no_time(cron: str) -> None:
    # Paris skips 02:00-03:00 on March's last Sunday: these crons name only that hour.
    cadence = Cadence.parse(cron, None, "Europe/Paris")
    with pytest.raises(CadenceError) as caught:
        cadence.next_after(utc(2026, 12, 3))
    assert str(caught.value) == "cron: matches no time that exists in its time zone"
    # One day of the year besides, and it fires that day.
    cadence = Cadence.parse(cron.replace("0L", "0L,1"), None, "Europe/Paris")
    assert cadence.next_after(utc(2026, 12, 3)).month == 3


def test_a_good_config_schedule() -> None:
    data = {
        "types": {"noop": {}},
        "schedules": {"nightly": {"cron": "0  3 * * *", "type": "noop", "priority": "HIGH"}},
    }
    nightly = Settings.model_validate(data).schedules["nightly"]
    assert nightly.priority == "high" and nightly.overlap is True
    assert nightly.cadence() == Cadence("0 3 * * *", None, "UTC")
