"""The weekly summary (issue 21 §6) from the analytics over the whole week: every squatting
episode (the idle-GPU rules evaluated every 30 min through the week, not only at the moments the
pipeline happened to evaluate), idle capacity with its GPU-hours.

ISO week 2026-W40 (Sep 28 – Oct 5 00:00) of tests/helpers/statement_fixtures.py: alpha-1 and
beta-1 hold 96 h each from Oct 1 (H100 192.00, A100 96.00), gamma-1 24 h (48.00): research 120
GPU-hours, 240.00; product 96 h, 96.00. Idle capacity (the week is 168 h): H100 2 × 168 − 120 =
216 h × 2.00 = 432.00, A100 168 − 96 = 72 h × 1.00 = 72.00: the org's row 288 GPU-hours, 504.00.

Seeded idle samples (sm_active 0.0 every 30 s), no pipeline evaluation at all:
  alpha-1 on GPU-h1, Oct 1 00:00–04:00 (the job starts 00:00): judged after the 30 min grace, idle
    from 00:30; a finding from 01:30 (60 min sustained); the last with 80 % of its window sampled
    is 04:00, so the worst evaluation says 04:00 − 00:30 = 3.5 idle GPU-hours (7.00 at 2.00).
  beta-1 on GPU-a, Oct 2 00:00–03:00 (started Oct 1, grace long past): idle from 00:00, worst at
    03:00: 3.0 idle GPU-hours (3.00 at 1.00)."""

from __future__ import annotations

import json
from decimal import Decimal

import numpy as np
import polars as pl
import pytest
from typer.testing import CliRunner

from gpuledger import warehouse
from gpuledger.cli import app
from tests.helpers.statement_fixtures import october

D = Decimal


def _idle(con, uuid: str, start: str, hours: int) -> None:
    gpu = con.execute("SELECT gpu_id FROM gpus WHERE gpu_uuid = ?", [uuid]).fetchall()[0][0]
    n = hours * 120
    warehouse.write_samples(con, pl.DataFrame({
        "gpu_id": np.full(n, gpu, dtype=np.int32),
        "ts": np.datetime64(start, "us") + np.arange(n) * np.timedelta64(30, "s"),
        "sm_active_ratio": np.zeros(n)}), "test")


@pytest.mark.slow
def test_weekly_summary_lists_every_episode_and_idle_hours(warehouse_file, tmp_path):
    october(warehouse_file)
    with warehouse.open_writer(warehouse_file) as con:
        _idle(con, "GPU-h1", "2026-10-01T00:00:00", 4)
        _idle(con, "GPU-a", "2026-10-02T00:00:00", 3)
        con.execute("UPDATE jobs SET name = 'finetune-llama' WHERE job_id = 'alpha-1'")  # beta-1 has no name
    out = tmp_path / "w40"
    result = CliRunner().invoke(app, ["report", "weekly", "--week", "2026-W40", "--out", str(out),
                                      "--warehouse", str(warehouse_file)])
    assert result.exit_code == 0, result.output
    units = pl.read_csv(out / "weekly-2026-W40.csv", schema_overrides={"spend": pl.String})
    got = {r["business_unit"]: (r["gpu_hours"], D(r["spend"])) for r in units.iter_rows(named=True)}
    assert got == {"research": (120.0, D("240.00")), "product": (96.0, D("96.00")), "(org)": (288.0, D("504.00"))}
    squat = pl.read_csv(out / "weekly-2026-W40-squatters.csv", schema_overrides={"idle_cost": pl.String})
    assert squat.select("business_unit", "rank", "job_id", "gpu_hours_idle", "idle_cost").rows() == [
        ("product", 1, "beta-1", 3.0, "3.00"), ("research", 1, "alpha-1", 3.5, "7.00")]
    assert squat["job_name"].to_list() == ["beta-1", "finetune-llama"]  # the name people gave it, else the id
    assert "<td>finetune-llama</td>" in (out / "weekly-2026-W40.html").read_text()
    assert "2 episodes in the week (6.500 idle GPU-hours held)" in result.output
    assert json.loads((out / "manifest.json").read_text())["week"] == "2026-W40"
    html = (out / "weekly-2026-W40.html").read_text()  # as read: human headers, each with its unit
    assert "<th>Spend (USD)</th>" in html and "<th>Idle cost (USD)</th>" in html and "<th>First seen (UTC)</th>" in html
    assert "gpu_hours_idle" not in html and "budget_gpu_hours" not in html  # machine names stay in the CSV


@pytest.mark.slow
def test_the_weeks_of_a_month_add_up_to_its_statement_to_the_cent(warehouse_file):
    """October's weeks (Oct 1–5, 5–12, 12–19, 19–26, 26–Nov 1) share out October's statement cents
    by their exact amounts: they add up to it per business unit exactly (research 528.00, product
    240.00, the org's idle 2,952.00), a cent of rounding going to the largest remainders. A
    price of 2.0003 /h for H100 makes the exact week amounts end in fractions of a cent."""
    from datetime import datetime

    from gpuledger.reports.weekly import _weeks_of_month, month_shares
    from tests.helpers.ledger_fixtures import load
    from tests.helpers.statement_fixtures import CONFIG

    october(warehouse_file)
    with warehouse.open_writer(warehouse_file) as con:
        load(con, CONFIG.replace('"2.00"', '"2.0003"'), at=datetime(2026, 10, 1))
    unit = (pl.when(pl.col("project") == "(idle)").then(pl.lit("(org)"))
            .otherwise(pl.col("project").replace_strict({"alpha": "research", "gamma": "research", "beta": "product"},
                                                        default="?")))
    parts = _weeks_of_month(datetime(2026, 10, 1), datetime(2026, 11, 1))
    assert [a.day for a, _ in parts] == [1, 5, 12, 19, 26]
    with warehouse.open_reader(warehouse_file) as con:
        from gpuledger.ledger.periods import statement_lines

        month = statement_lines(con, "2026-10")
        owed = month.with_columns(business_unit=unit).group_by("business_unit").agg(pl.col("amount").sum())
        weeks = [month_shares(con, a, b, policy=None, now=datetime(2026, 11, 3), unit_expr=unit) for a, b in parts]
    summed = pl.concat(weeks).group_by("business_unit").agg(pl.col("spend").sum())
    assert dict(summed.iter_rows()) == dict(owed.iter_rows())
    # research: alpha 240 h + gamma 24 h at 2.0003 = 528.0792 -> 528.08 for the month
    assert dict(owed.iter_rows())["research"] == D("528.08")


def test_the_week_is_judged_from_one_read_of_its_tables_and_its_idle_candidates(warehouse_file):
    """The week's episodes come from the tables read once (weekly._WeekTables: its findings at a
    moment are squatters_report's at that moment) and only at the moments some held GPU could be
    idle (weekly.idle_candidate_moments, one pass over the week's samples).

    Candidates (the module docstring's seeded samples; window = the 60 min before the moment):
    alpha-1's GPU-h1 has idle samples Oct 1 00:00–04:00, so the windows ending 00:30 ... 04:30
    hold some (9 moments); beta-1's GPU-a Oct 2 00:00–03:00: 00:30 ... 03:30 (7). GPU-h2 reads
    sm_active 0.5 all of Oct 1 (gamma-1): an active sample in every window, never a candidate."""
    from datetime import datetime, timedelta

    from gpuledger.analytics.queries import squatters_report
    from gpuledger.config import Policy
    from gpuledger.reports.weekly import REPLAY_STEP, _WeekTables, idle_candidate_moments

    october(warehouse_file)
    with warehouse.open_writer(warehouse_file) as con:
        _idle(con, "GPU-h1", "2026-10-01T00:00:00", 4)
        _idle(con, "GPU-a", "2026-10-02T00:00:00", 3)
    start, end = datetime(2026, 9, 28), datetime(2026, 10, 5)
    half = timedelta(minutes=30)
    want = {datetime(2026, 10, 1) + half * i for i in range(1, 10)} | \
        {datetime(2026, 10, 2) + half * i for i in range(1, 8)}
    policy = Policy()
    with warehouse.open_reader(warehouse_file) as con:
        assert idle_candidate_moments(con, policy, start=start, end=end) == want
        week = _WeekTables(con, policy, start=start, end=end, step=REPLAY_STEP)
        for moment in (datetime(2026, 10, 1, 2), datetime(2026, 10, 1, 4), datetime(2026, 10, 2, 3),
                       datetime(2026, 10, 1, 12)):  # findings (alpha-1, beta-1) and none
            assert week.findings(moment).equals(squatters_report(con, policy=policy, now=moment)), moment
        assert week.findings(datetime(2026, 10, 1, 2)).height == 1
