"""A budget as a reader plans with it (facts.budget_outlook): the projected exhaustion shown only
inside the period, and what the burn rate leaves at the period's end. Hand-derived: November's
period [2026-11-01, 2026-12-01), as of 2026-11-21 00:00, so 10 days are left."""

from __future__ import annotations

import subprocess
import sys
from datetime import date, datetime, timedelta

import polars as pl
import pytest

from gpuledger.facts.budget_outlook import with_outlook
from gpuledger.facts.rows import Rows

AS_OF = datetime(2026, 11, 21)
END = date(2026, 12, 1)
# node: remaining, burn per day, projected exhaustion (as analytics.budget computes it: as_of + remaining/burn)
CASES = {
    "lasts": (100.0, 5.0, AS_OF + timedelta(days=20)),  # 12-11, past the period's end
    "short": (30.0, 5.0, AS_OF + timedelta(days=6)),  # 11-27, inside it
    "spent": (-4.0, 5.0, None),  # exhausted: no projection
    "idle": (10.0, 0.0, None),  # not burning
}
SCHEMA = {"node": "String", "period_end": "Date", "remaining_gpu_hours": "Float64",
          "burn_gpu_hours_per_day": "Float64", "projected_exhaustion": "Datetime", "status": "String"}


def _rows() -> Rows:
    return Rows([(n, END, r, b, p, "x") for n, (r, b, p) in CASES.items()], SCHEMA)


def test_runs_out_only_inside_the_period_and_what_is_left_at_its_end():
    got = with_outlook(_rows().to_polars(), as_of=AS_OF)
    by = {r["node"]: r for r in got.iter_rows(named=True)}
    # lasts: 100 - 5 x 10 = 50 left; its 12-11 projection falls after the period: no date
    assert by["lasts"]["runs_out"] is None and by["lasts"]["left_at_period_end"] == 50.0
    # short: 30 / 5 = 6 days -> runs out 11-27; nothing left (30 - 50 < 0)
    assert by["short"]["runs_out"] == datetime(2026, 11, 27) and by["short"]["left_at_period_end"] == 0.0
    # spent: nothing left, no date; idle: keeps its 10
    assert by["spent"]["runs_out"] is None and by["spent"]["left_at_period_end"] == 0.0
    assert by["idle"]["runs_out"] is None and by["idle"]["left_at_period_end"] == 10.0
    # the two columns right after the projection they come from
    assert got.columns == ["node", "period_end", "remaining_gpu_hours", "burn_gpu_hours_per_day",
                           "projected_exhaustion", "runs_out", "left_at_period_end", "status"]


def test_materialized_rows_get_the_same_outlook_without_polars():
    rows = with_outlook(_rows(), as_of=AS_OF)
    assert isinstance(rows, Rows)
    assert rows.to_polars().equals(with_outlook(_rows().to_polars(), as_of=AS_OF))
    # the CLI's materialized path: Rows in, Rows out, and polars never loaded on the way
    probe = ("import sys; from datetime import date, datetime; from gpuledger.facts import with_outlook, Rows; "
             "r = Rows([('n', date(2026, 12, 1), 100.0, 5.0, datetime(2026, 12, 11), 'funded')], "
             f"{SCHEMA!r}); out = with_outlook(r, as_of=datetime(2026, 11, 21)); "
             "print(out['left_at_period_end'].to_list(), 'polars' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[50.0]", "False"]  # 100 - 5 x 10 days, as test 1 derives


def test_a_snapshot_row_is_read_as_of_its_own_moment():
    # a daily snapshot's as_of (11-26: 5 days left) wins over the reader's: 100 - 5 x 5 = 75
    frame = _rows().to_polars().head(1).with_columns(as_of=pl.lit(datetime(2026, 11, 26)))
    assert with_outlook(frame, as_of=AS_OF)["left_at_period_end"].to_list() == pytest.approx([75.0])
