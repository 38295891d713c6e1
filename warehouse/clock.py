""""Now" for the data, low in the warehouse so the analytics and the read model ask the same rule
without importing each other: the newest moment the samples cover (a window aggregate reaches its
newest raw sample: ts + covered_ms, migration 021) or job event (submit, start, end) that is not in
the future (a replayed or simulated week ends there); the wall clock when there is none."""

from __future__ import annotations

from datetime import datetime

from gpuledger.rules.clock import utc_now
from gpuledger.sql import load_sql


def data_now(con, *, wall: datetime | None = None) -> datetime:
    """"Now" for the data: the end of the samples' coverage or the newest job event, not after
    ``wall`` (default: the wall clock). A single row stamped in the future is ignored rather than moving "now" for every
    report. Naive UTC."""
    wall = wall or utc_now()
    newest = con.execute(load_sql(__package__, "data_now.sql"), {"wall": wall}).fetchall()[0][0]
    return newest if newest is not None else wall
