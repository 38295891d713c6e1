"""Periods (gpuledger.rules.periods): one reader of period names for the chargeback report, the
ledger's monthly statements, the weekly summary and config budgets — the same bounds and the
same one-line error whichever asks."""

from __future__ import annotations

from datetime import datetime

import pytest

from gpuledger.errors import UsageError
from gpuledger.rules.periods import month_bounds, months_between, next_month, period_bounds, week_bounds


@pytest.mark.parametrize(("period", "bounds"), [
    ("2026-10", (datetime(2026, 10, 1), datetime(2026, 11, 1))),
    ("2026-12", (datetime(2026, 12, 1), datetime(2027, 1, 1))),
    ("2028-02", (datetime(2028, 2, 1), datetime(2028, 3, 1))),  # leap year: 29 days
    ("2026-10-05", (datetime(2026, 10, 5), datetime(2026, 10, 6))),
    ("2026-W41", (datetime(2026, 10, 5), datetime(2026, 10, 12))),  # ISO week 41 of 2026: Mon 5 Oct
    ("2026-W53", (datetime(2026, 12, 28), datetime(2027, 1, 4))),  # 2026 has 53 ISO weeks (Thu 1 Jan)
    (" 2026-10 ", (datetime(2026, 10, 1), datetime(2026, 11, 1))),
    ("2026-10-01..2026-10-03T12:00", (datetime(2026, 10, 1), datetime(2026, 10, 3, 12))),
    # an offset converts to UTC: 02:00+02:00 is midnight UTC
    ("2026-10-01T02:00+02:00..2026-10-02T00:00Z", (datetime(2026, 10, 1), datetime(2026, 10, 2))),
])
def test_bounds(period, bounds):
    assert period_bounds(period) == bounds


def test_a_range_mixing_a_zone_and_none_is_read_not_a_traceback():
    # the chargeback reader compared an aware end with a naive start: TypeError, a traceback
    assert period_bounds("2026-11-01..2026-11-02T00:00Z") == (datetime(2026, 11, 1), datetime(2026, 11, 2))


@pytest.mark.parametrize(("period", "reason"), [
    ("2026-13", "month must be 01..12"),
    ("2026-02-30", "no such date"),
    ("2026-W60", "no such date"),
    ("2026-11-05..2026-11-01", "the end must come after the start"),
    ("October", "not a period"),
])
def test_bad_periods_are_one_usage_error_naming_the_period_and_the_forms(period, reason):
    with pytest.raises(UsageError) as caught:
        period_bounds(period)
    text = str(caught.value)
    assert text.startswith(f"period {period!r}: {reason}") and "give YYYY-MM, YYYY-MM-DD" in text
    assert "\n" not in text


def test_statements_and_the_weekly_summary_say_the_same_about_the_same_period():
    # the ledger's month reader said "statements are per calendar month" for 2026-13 too, while the
    # chargeback reader said "month must be 01..12": now the reason is the period's, the forms the caller's
    for read in (month_bounds, period_bounds):
        with pytest.raises(UsageError, match=r"^period '2026-13': month must be 01\.\.12; give YYYY-MM"):
            read("2026-13")
    with pytest.raises(UsageError, match=r"^period '2026-W44': statements are per calendar month; give YYYY-MM \("):
        month_bounds("2026-W44")
    with pytest.raises(UsageError, match=r"^period '2026-W60': no such date \(Invalid week: 60\); give YYYY-Www"):
        week_bounds("2026-W60")
    with pytest.raises(UsageError, match=r"^period '2026-10': the summary is per ISO week; give YYYY-Www"):
        week_bounds("2026-10")


def test_weekly_summary_names_its_option_and_the_rule():
    from gpuledger.reports.weekly import build_weekly

    with pytest.raises(UsageError, match=r"^--week: period '2026-W60': no such date"):
        build_weekly(None, "2026-W60")


def test_config_budget_month_reads_the_same_rule():
    from gpuledger.config import Budget

    budget = Budget(node="p", gpu_hours=10, period="2028-02")
    assert (budget.start.isoformat(), budget.end.isoformat()) == ("2028-02-01", "2028-03-01")
    with pytest.raises(ValueError, match="month must be 01..12"):
        Budget(node="p", gpu_hours=10, period="2026-13")


def test_month_helpers():
    assert next_month(datetime(2026, 12, 31, 23)) == datetime(2027, 1, 1)
    assert months_between(datetime(2026, 11, 28), datetime(2027, 1, 2)) == ["2026-11", "2026-12", "2027-01"]
    assert months_between(datetime(2026, 11, 1), datetime(2026, 12, 1)) == ["2026-11"]
