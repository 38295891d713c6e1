"""The clock rule: time is UTC, held as naive datetimes (the warehouse's convention, DuckDB's
TIMESTAMP); the one "now", the one ISO-8601 reader and writer, the one duration reader."""

from __future__ import annotations

import re
from datetime import UTC, datetime

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(d|h|m|s)", re.IGNORECASE)
_UNIT_S = {"d": 86400, "h": 3600, "m": 60, "s": 1}
# Years 1970-9999: a window ending in 9999-12 would need a month after it, past datetime's range.
EARLIEST_TIME, LATEST_TIME = datetime(1970, 1, 1), datetime(9999, 12, 1)


def utc_now() -> datetime:
    """The wall clock as naive UTC (microseconds kept)."""
    return datetime.now(UTC).replace(tzinfo=None)


def naive_utc(moment: datetime) -> datetime:
    """``moment`` as the warehouse holds it: an aware datetime converted to UTC and made naive; a
    naive one is taken to be UTC already."""
    return moment.astimezone(UTC).replace(tzinfo=None) if moment.tzinfo is not None else moment


def iso_z(moment: datetime) -> str:
    """``2026-11-01T08:00:00Z``: ISO-8601 to the second, UTC marked (naive is taken as UTC)."""
    return naive_utc(moment).strftime("%Y-%m-%dT%H:%M:%SZ")


def iso_z_us(moment: datetime) -> str:
    """``2026-11-01T08:00:00.250000Z``: iso_z with microseconds (a sample's own stamp)."""
    return naive_utc(moment).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def epoch_iso_z(epoch_s: float) -> str:
    """iso_z of epoch seconds (a TSDB's or a lock file's stamp)."""
    return iso_z(datetime.fromtimestamp(epoch_s, UTC))


def parse_iso(text: str) -> datetime:
    """ISO-8601 with a ``Z``, an offset or none (UTC) -> naive UTC; ValueError as ``fromisoformat``'s."""
    return naive_utc(datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00")))


def parse_utc(text: str) -> datetime:
    """ISO-8601 (offset or Z converted to UTC; no offset means UTC) or epoch seconds -> naive UTC.

    Raises ValueError with a message saying what was expected.
    """
    value = text.strip()
    if not value:
        raise ValueError("empty time")
    if re.fullmatch(r"-?\d+(\.\d+)?", value):
        try:
            parsed = datetime.fromtimestamp(float(value), UTC).replace(tzinfo=None)
        except (OverflowError, OSError, ValueError):
            raise ValueError(f"{value[:30]!r} epoch seconds is outside {EARLIEST_TIME.year}..{LATEST_TIME.year}") from None
    else:
        try:
            parsed = parse_iso(value)
        except (ValueError, OverflowError):
            raise ValueError(
                f"{value!r} is not a time: use ISO-8601 (2026-11-01T08:00:00Z) or epoch seconds"
            ) from None
    if not EARLIEST_TIME <= parsed < LATEST_TIME:
        raise ValueError(f"{value!r} is outside the times gpuledger handles: from {EARLIEST_TIME:%Y-%m-%d} "
                         f"to before {LATEST_TIME:%Y-%m-%d} (UTC)")
    return parsed


def parse_duration_s(text: str) -> int:
    """'4h', '2h30m', '90m', '1d', 'HH:MM:SS' or plain seconds -> whole seconds."""
    value = text.strip()
    if re.fullmatch(r"\d+(\.\d+)?", value):
        return round(float(value))
    if re.fullmatch(r"\d+:\d{2}:\d{2}", value):
        h, m, s = map(int, value.split(":"))
        return h * 3600 + m * 60 + s
    parts = _DURATION_PART.findall(value)
    if parts and _DURATION_PART.sub("", value).strip() == "":
        return round(sum(float(n) * _UNIT_S[u.lower()] for n, u in parts))
    raise ValueError(f"{value!r} is not a duration: use seconds, 4h, 2h30m, 90m or HH:MM:SS")
