"""Periods: the one reader of a period's name and its [start, end) bounds, in UTC.

Forms: ``YYYY-MM`` (a calendar month), ``YYYY-MM-DD`` (a day), ``YYYY-Www`` (an ISO week, Monday
start) and ``START..END`` (ISO dates or times, an offset or ``Z`` converted to UTC, end
exclusive). A command that takes only some forms (statements are per month, the weekly summary
per ISO week) names them; anything else is a :class:`PeriodError` whose one line says the
period, what is wrong with it and the forms to give, the same words whichever command asked.
"""

from __future__ import annotations

import re
from datetime import date, datetime, timedelta

from gpuledger.errors import UsageError
from gpuledger.rules.clock import EARLIEST_TIME, LATEST_TIME, parse_iso

MONTH, DAY, WEEK, RANGE = "month", "day", "week", "range"
ALL_FORMS = (MONTH, DAY, WEEK, RANGE)
_SPELLING = {MONTH: "YYYY-MM", DAY: "YYYY-MM-DD", WEEK: "YYYY-Www (ISO week)", RANGE: "START..END"}
_EXAMPLE = {MONTH: "2026-10", DAY: "2026-10-05", WEEK: "2026-W44", RANGE: "2026-10-01..2026-10-15"}
_MONTH = re.compile(r"(\d{4})-(\d{2})")
_WEEK = re.compile(r"(\d{4})-W(\d{2})")
_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")


class PeriodError(UsageError):
    """A period that cannot be read, closed or corrected as asked; the message says what would (exit 2)."""


def _form_of(text: str) -> str | None:
    if ".." in text:
        return RANGE
    if _MONTH.fullmatch(text):
        return MONTH
    if _WEEK.fullmatch(text):
        return WEEK
    if _DAY.fullmatch(text):
        return DAY
    return None


def period_bounds(period: str, forms: tuple[str, ...] = ALL_FORMS, *, why: str | None = None) -> tuple[datetime, datetime]:
    """[start, end) of ``period`` (naive UTC) in one of ``forms``, within the times gpuledger
    handles (1970-01-01 to before 9999-12-01); ``why`` says why only those forms (e.g.
    "statements are per calendar month"). PeriodError otherwise."""
    lo, hi = _bounds(period, forms, why)
    if not (EARLIEST_TIME <= lo and hi <= LATEST_TIME):
        raise _out_of_range(period)
    return lo, hi


def _out_of_range(period: str) -> PeriodError:
    return PeriodError(f"period {period!r}: give a period from 1970-01 to 9999-11 (UTC: from "
                       f"{EARLIEST_TIME:%Y-%m-%d} to before {LATEST_TIME:%Y-%m-%d})")


def _bounds(period: str, forms: tuple[str, ...], why: str | None) -> tuple[datetime, datetime]:
    text = period.strip()
    form = _form_of(text)

    def fail(reason: str):
        spelled = [_SPELLING[f] for f in forms]
        give = spelled[0] if len(spelled) == 1 else ", ".join(spelled[:-1]) + " or " + spelled[-1]
        return PeriodError(f"period {period!r}: {reason}; give {give} (e.g. {_EXAMPLE[forms[0]]})")

    if form not in forms:
        raise fail(why or ("not a period" if form is None else f"a {form} is not taken here"))
    try:
        if form == RANGE:
            lo, hi = (parse_iso(p) for p in text.split("..", 1))
            if hi <= lo:
                raise fail("the end must come after the start")
            return lo, hi
        if form == MONTH:
            m = _MONTH.fullmatch(text)
            if not 1 <= int(m[2]) <= 12:
                raise fail("month must be 01..12")
            if not (1970, 1) <= (int(m[1]), int(m[2])) <= (9999, 11):  # 9999-12 ends past datetime's range
                raise _out_of_range(period)
            start = datetime(int(m[1]), int(m[2]), 1)
            return start, next_month(start)
        if form == WEEK:
            m = _WEEK.fullmatch(text)
            start = datetime.combine(date.fromisocalendar(int(m[1]), int(m[2]), 1), datetime.min.time())
            return start, start + timedelta(days=7)
        start = datetime.fromisoformat(text)
        return start, start + timedelta(days=1)
    except PeriodError:
        raise
    except (ValueError, OverflowError) as exc:  # a date that does not exist: 2026-02-30, week 60
        raise fail(f"no such date ({exc})") from None


def month_bounds(period: str) -> tuple[datetime, datetime]:
    """[start, end) of ``YYYY-MM``; statements are issued per calendar month."""
    return period_bounds(period, (MONTH,), why="statements are per calendar month")


def week_bounds(week: str) -> tuple[datetime, datetime]:
    """[start, end) of the ISO week ``YYYY-Www`` (Monday 00:00 UTC to the next Monday)."""
    return period_bounds(week, (WEEK,), why="the summary is per ISO week")




def next_month(moment: datetime) -> datetime:
    """Midnight of the first day of the month after ``moment``'s."""
    first = datetime(moment.year, moment.month, 1)
    return (first + timedelta(days=32)).replace(day=1)


def months_between(start: datetime, end: datetime) -> list[str]:
    """``YYYY-MM`` of every month [start, end) touches."""
    out, y, m = [], start.year, start.month
    while datetime(y, m, 1) < end:
        out.append(f"{y:04d}-{m:02d}")
        y, m = (y + 1, 1) if m == 12 else (y, m + 1)
    return out
