"""Jobs without device allocations (CSV importer, Kubernetes, Slurm), and the gpu_hourly rollup.

Numbers derived by hand. A job-level allocation holds jobs.gpus GPUs of jobs.gpu_model at the
default tier from start to end (or now), on no known device: activity unknown.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta
from decimal import Decimal

import duckdb
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from gpuledger.analytics.allocations import allocation_intervals
from gpuledger.analytics.attribution import (
    allocated_pieces,
    attribute_usage,
    hourly_rollup,
    partial_hour_keys,
    rollup_usage,
)
from gpuledger.analytics.budget import budget_burn
from gpuledger.analytics.chargeback import chargeback_lines, chargeback_totals
from gpuledger.analytics.fairshare import delivery
from gpuledger.analytics.load import load_hourly, load_samples_for_hours
from gpuledger.warehouse.rollups import refresh_gpu_hourly
from gpuledger.analytics.usage import project_usage
from gpuledger.analytics.utilization import utilization_hourly
from tests.helpers.analytics_frames import allocations, at, budgets, every, gpus, jobs, org, rate_card, samples

RATES = rate_card([("H100", "reserved", datetime(2026, 1, 1), "2.10"),
                   ("H100", "spot", datetime(2026, 1, 1), "1.00")])
DAY = (at(0), at(24))
NOW = at(48)


def _csv_job(**kw):
    # 460 milli-GPU for 10 h, 02:00-12:00, no device known.
    return {"job_id": "K", "project": "q", "gpus": 0.46, "start": at(2), "end": at(12), **kw}


def test_csv_style_job_counts_0_46_gpu_for_10_hours():
    inv = gpus([{"gpu_id": 1}])
    jb = jobs([_csv_job()])
    none = allocations([])
    df = attribute_usage(none, inv, samples([]), now=NOW, jobs=jb).collect()
    # 10 hourly rows of 0.46 GPU-hours: 4.6 in all, all of it unknown activity.
    assert df.height == 10
    assert df["gpu_hours_allocated"].sum() == pytest.approx(4.6)
    assert df["gpu_hours_unknown"].sum() == pytest.approx(4.6)
    assert df["gpu_hours_active"].sum() == 0 and df["gpu_hours_idle"].sum() == 0
    row = df.row(0, named=True)
    assert row["gpu_id"] is None and row["model"] == "H100" and row["tier"] == "reserved"
    assert row["allocation_level"] == "job" and row["energy_kwh"] is None
    assert rollup_usage(df.lazy(), jb).collect()["gpu_hours_allocated"].to_list() == [pytest.approx(4.6)]
    # Without jobs the old behaviour: nothing (the lead's entry points must pass jobs).
    assert attribute_usage(none, inv, samples([]), now=NOW).collect().height == 0
    # Window and decay usage count it too.
    use = project_usage(none, inv, jb, as_of=at(12)).collect()
    assert use["gpu_hours_window"].to_list() == [pytest.approx(4.6)]
    # Chargeback: 4.6 × 2.10 = 9.66; with the spot default tier 4.6 × 1.00 = 4.60.
    lines = chargeback_lines(none, inv, jb, RATES, start=DAY[0], end=DAY[1], now=NOW).collect()
    assert lines.filter(pl.col("job_id") == "K")["amount"].to_list() == [Decimal("9.66")]
    spot = chargeback_lines(none, inv, jb, RATES, start=DAY[0], end=DAY[1], now=NOW, default_tier="spot").collect()
    assert spot.filter(pl.col("job_id") == "K")[["tier", "amount"]].rows() == [("spot", Decimal("4.60"))]


def test_split_at_hour_and_period_boundaries():
    # 0.5 GPU from 22:30 to 01:15 the next day: 0.25 + 0.5 in day 1, 0.5 + 0.125 in day 2.
    jb = jobs([{"job_id": "K", "project": "q", "gpus": 0.5, "start": at(22, 30), "end": at(25, 15)}])
    pieces = allocated_pieces(allocations([]), gpus([{"gpu_id": 1}]), now=NOW, jobs=jb).collect()
    assert pieces.sort("hour")["gpu_hours_allocated"].to_list() == pytest.approx([0.25, 0.5, 0.5, 0.125])
    day1 = chargeback_lines(allocations([]), gpus([{"gpu_id": 1}]), jb, RATES, start=at(0), end=at(24),
                            now=NOW).collect().filter(pl.col("job_id") == "K")
    assert day1["gpu_hours_allocated"].to_list() == [pytest.approx(0.75)]


def test_which_jobs_are_job_level():
    inv = gpus([{"gpu_id": 1}])
    al = allocations([("D", 1, at(0), at(2))])
    jb = jobs([
        {"job_id": "D", "project": "p", "gpus": 8, "start": at(0), "end": at(2)},  # has a device: not again
        {"job_id": "Q", "project": "p", "gpus": 2},                                 # queued: never started
        {"job_id": "R", "project": "p", "gpus": 2, "start": at(1)},                 # running: up to now
        {"job_id": "Z", "project": "p", "gpus": 0, "start": at(1), "end": at(2)},   # no GPUs
    ])
    iv = allocation_intervals(al, inv, jb).collect()
    assert sorted(iv["job_id"].to_list()) == ["D", "R"]
    assert iv.filter(pl.col("job_id") == "D")["allocation_level"].to_list() == ["device"]
    pieces = allocated_pieces(al, inv, now=at(4), jobs=jb).collect()
    by_job = dict(pieces.group_by("job_id").agg(pl.col("gpu_hours_allocated").sum()).iter_rows())
    assert by_job == {"D": pytest.approx(2.0), "R": pytest.approx(6.0)}  # R: 2 GPUs × 3 h to now


def _mixed():
    # c1 has 2 H100s. J holds GPU 1 for 10 h (device level); K is the CSV job (0.46 × 10 h);
    # L runs on c2, which has no inventory: 2 GPUs × 5 h.
    inv = gpus([{"gpu_id": 1}, {"gpu_id": 2}])
    al = allocations([("J", 1, at(1), at(11))])
    jb = jobs([{"job_id": "J", "project": "p", "start": at(1), "end": at(11)}, _csv_job()])
    jb = pl.concat([jb, jobs([{"job_id": "L", "project": "p", "gpus": 2, "start": at(3), "end": at(8)}])
                    .with_columns(cluster=pl.lit("c2"))])
    return inv, al, jb


def test_mixed_period_reconciles_to_the_cent():
    inv, al, jb = _mixed()
    df = chargeback_lines(al, inv, jb, RATES, start=DAY[0], end=DAY[1], now=NOW).collect()
    amounts = {(r["line_kind"], r["cluster"], r["job_id"]): r["amount"] for r in df.to_dicts()}
    # c1 capacity 2 × 24 h × 2.10 = 100.80. J 10 h = 21.00, K 4.6 h = 9.66,
    # idle 48 − 14.6 = 33.4 h = 70.14; 21.00 + 9.66 + 70.14 = 100.80.
    assert amounts[("charge", "c1", "J")] == Decimal("21.00")
    assert amounts[("charge", "c1", "K")] == Decimal("9.66")
    assert amounts[("idle", "c1", None)] == Decimal("70.14")
    idle = df.filter(pl.col("line_kind") == "idle")
    assert idle["gpu_hours_allocated"].to_list() == [pytest.approx(33.4)]
    # L on c2: 10 GPU-hours × 2.10 = 21.00 and no idle line (c2 has no capacity).
    assert amounts[("charge", "c2", "L")] == Decimal("21.00")
    assert idle["cluster"].to_list() == ["c1"]
    total = chargeback_totals(inv, RATES, start=DAY[0], end=DAY[1]).collect()["capacity_amount"][0]
    assert total == Decimal("100.80")
    # The billed lines (charge, idle) add up to c1's capacity plus c2's charges; c2's capacity is
    # unknown, which its memo line (outside the total) says with those same 21.00.
    assert df.filter(pl.col("billed"))["amount"].sum() == total + Decimal("21.00")
    memo = df.filter(pl.col("line_kind") == "capacity-unknown")
    assert memo.select("cluster", "amount", "billed").rows() == [("c2", Decimal("21.00"), False)]
    c1 = df.filter(pl.col("cluster") == "c1")["amount"].sum()
    assert c1 == total
    # Spread: c1's idle goes to J and K by charge (21.00 : 9.66); L untouched; same total.
    spread = chargeback_lines(al, inv, jb, RATES, start=DAY[0], end=DAY[1], now=NOW, idle_cost="spread").collect()
    assert spread.filter(pl.col("line_kind") == "idle").height == 0
    assert spread.filter(pl.col("billed"))["amount"].sum() == df.filter(pl.col("billed"))["amount"].sum()
    assert spread.filter(pl.col("job_id") == "L")["amount"].to_list() == [Decimal("21.00")]


def test_job_level_beyond_the_inventory_is_over_allocated():
    # 1 GPU installed; a job record says 3 GPUs all day: charges 72 h = 151.20 stand. Capacity
    # is 24 h = 50.40, so 48 h = 100.80 are over-allocated: a memo line naming the job, not the
    # negative idle line of before (issue 8 item 4: idle never goes negative silently).
    # charges + idle (0) = capacity + over-allocated: 151.20 = 50.40 + 100.80.
    inv = gpus([{"gpu_id": 1}])
    jb = jobs([{"job_id": "BIG", "project": "p", "gpus": 3, "start": at(0), "end": at(24)}])
    for mode in ("line", "spread"):
        df = chargeback_lines(allocations([]), inv, jb, RATES, start=DAY[0], end=DAY[1], now=NOW,
                              idle_cost=mode).collect()
        rows = {r["line_kind"]: r for r in df.to_dicts()}
        assert set(rows) == {"charge", "over-allocated"}
        assert rows["charge"]["amount"] == Decimal("151.20")
        over = rows["over-allocated"]
        assert (over["gpu_hours_allocated"], over["amount"], over["note"], over["billed"]) == (
            pytest.approx(48), Decimal("100.80"), "jobs: BIG", False)
        assert df.filter(pl.col("billed"))["amount"].sum() == Decimal("151.20")


def test_budget_delivery_and_utilization_count_job_level():
    inv, al, jb = _mixed()
    tree = org([("acme", None, 1), ("p", "acme", 1), ("q", "acme", 1)])
    bud = budgets([("q", date(2026, 11, 1), date(2026, 12, 1), "10")])
    burn = {r["node"]: r for r in budget_burn(al, inv, jb, tree, bud, RATES, as_of=at(24)).collect().to_dicts()}
    assert burn["q"]["consumed_gpu_hours"] == pytest.approx(4.6)
    dl = {r["node"]: r for r in delivery(jb, al, inv, tree, start=DAY[0], end=DAY[1], now=NOW).collect().to_dicts()}
    # p: J 10 + L 10; q: K 4.6.
    assert dl["p"]["gpu_hours_allocated"] == pytest.approx(20.0)
    assert dl["q"]["gpu_hours_allocated"] == pytest.approx(4.6)
    att = attribute_usage(al, inv, samples(every(1, at(1), at(11), sm=0.5)), now=NOW, jobs=jb)
    util = utilization_hourly(att, inv, start=DAY[0], end=DAY[1], by=("cluster",)).collect()
    at5 = {r["cluster"]: r for r in util.filter(pl.col("hour") == at(5)).to_dicts()}
    # c1 at 05:00: J 1 + K 0.46 of 2 GPUs; active 0.5 (J only), unknown 0.46.
    assert at5["c1"]["gpu_hours_allocated"] == pytest.approx(1.46)
    assert at5["c1"]["gpu_hours_unknown"] == pytest.approx(0.46)
    assert at5["c1"]["allocation_pct"] == pytest.approx(73.0)
    assert at5["c2"]["gpu_hours_allocated"] == pytest.approx(2.0) and at5["c2"]["gpu_hours_capacity"] == 0


# ---- the gpu_hourly rollup ---------------------------------------------------------------------

def _sample_rows():
    rows = every(1, at(9), at(12, 30), sm=0.25, gr=0.5)
    rows += every(2, at(9, 10), at(11, 50), step=timedelta(seconds=30), util=0.9)
    for i, r in enumerate(rows):
        r["energy"] = 5_000.0 + 100 * i if r["gpu_id"] == 1 else 1_000.0 + 10 * i
    for r in rows:  # GPU 1: the driver reloads at 10:20, the counter restarts at 30 J
        if r["gpu_id"] == 1 and r["ts"] >= at(10, 20):
            r["energy"] -= 5_000.0 + 100 * 80 - 30.0
    rows[5]["sm"] = None
    return rows


@pytest.fixture()
def con(tmp_path):
    from gpuledger import warehouse

    with warehouse.open_writer(tmp_path / "wh.duckdb") as c:
        rows = pl.DataFrame(samples(_sample_rows()).collect())
        warehouse.write_samples(c, rows, "test")
        yield c


def test_sql_rollup_equals_polars_rollup(con):
    # GPU 1 has samples in hours 9-12, GPU 2 in 9-11: 7 rows; refreshing again changes nothing.
    assert refresh_gpu_hourly(con, at(9, 5), at(12, 1)) == 7
    assert refresh_gpu_hourly(con, at(9), at(13)) == 7
    stored = con.sql("SELECT * FROM gpu_hourly ORDER BY gpu_id, hour").pl()
    mine = hourly_rollup(samples(_sample_rows())).sort("gpu_id", "hour").collect()
    assert_frame_equal(stored, mine.select(stored.columns), check_dtypes=False, abs_tol=1e-9)


def test_attribution_from_rollup_equals_from_samples(con):
    refresh_gpu_hourly(con, at(9), at(13))
    inv = gpus([{"gpu_id": 1}, {"gpu_id": 2}])
    al = allocations([("A", 1, at(9, 30), at(12)), ("B", 2, at(9), None, 0.5), ("C", 1, at(8), at(9, 30))])
    jb = jobs([{"job_id": "A", "project": "p", "start": at(9, 30)}, _csv_job()])
    raw = samples(_sample_rows())
    expected = attribute_usage(al, inv, raw, now=at(12, 15), jobs=jb).collect()
    keys = partial_hour_keys(allocated_pieces(al, inv, now=at(12, 15), jobs=jb))
    partial = load_samples_for_hours(con, keys)
    assert partial.collect().height < raw.collect().height
    hourly = load_hourly(con, start=at(0), end=at(13))
    got = attribute_usage(al, inv, partial, now=at(12, 15), jobs=jb, hourly=hourly).collect()
    key = ["cluster", "job_id", "gpu_id", "hour"]
    assert_frame_equal(got.sort(key, nulls_last=True), expected.sort(key, nulls_last=True),
                       check_dtypes=False, abs_tol=1e-9)


def test_write_samples_keeps_the_rollup_fresh(con):
    # The fixture only wrote samples; write_samples refreshed the hours they touch (7 rows).
    n_samples = con.execute("SELECT count(*) FROM gpu_samples").fetchall()[0][0]
    assert con.execute("SELECT count(*), sum(s_n) FROM gpu_hourly").fetchall() == [(7, n_samples)]


def test_load_hourly_falls_back_when_the_rollup_is_behind(con):
    # A writer that bypassed write_samples (or an old warehouse): the rollup is empty, so it is
    # computed from the samples on the fly.
    con.execute("DELETE FROM gpu_hourly").fetchall()
    hourly = load_hourly(con, start=at(9), end=at(13)).collect()
    assert hourly["s_n"].sum() == con.execute("SELECT count(*) FROM gpu_samples").fetchall()[0][0]
    assert con.execute("SELECT count(*) FROM gpu_hourly").fetchall()[0][0] == 0


def test_simulator_keeps_the_rollup_fresh(tmp_path):
    from gpuledger import warehouse
    from gpuledger.config import load_config
    from gpuledger.simulator.scenario import build_cluster
    from gpuledger.simulator.to_warehouse import write_simulation

    sim = build_cluster(seed=3, gpus=8, start=datetime(2026, 11, 1), days=0.25, interval_s=60,
                        cluster="sim", config=load_config(None), dirt=True)
    with warehouse.open_writer(tmp_path / "sim.duckdb") as c:
        write_simulation(c, sim, cells=2_000)
        stored = c.sql("SELECT * FROM gpu_hourly ORDER BY gpu_id, hour").pl()
        fresh = c.sql("SELECT * FROM gpu_samples").pl()
    mine = hourly_rollup(fresh.lazy()).sort("gpu_id", "hour").collect()
    assert stored["s_n"].sum() == fresh.height
    assert_frame_equal(stored, mine.select(stored.columns), check_dtypes=False, abs_tol=1e-6)


def test_duckdb_version_supports_the_rollup_sql():
    # arg_min ... FILTER and SEMI JOIN are used by rollup._ROLLUP_SELECT.
    assert duckdb.sql("SELECT arg_min(x, x) FILTER (WHERE x > 1) FROM range(5) t(x)").fetchall() == [(2,)]


def test_an_hours_pieces_never_join_allocations_outside_the_hour():
    # Issue 41: the 5-minute update cuts the touched hour (start=10:00, now=10:35) from the frames
    # it holds for the whole window. Rows outside the hour must be dropped before any join, or the
    # update's cost grows with the window's allocations instead of the hour's. The rows outside
    # carry a gpu_id that does not fit INTEGER: casting it for the inventory join raises, so the
    # hour's cut fails if it reads them at all.
    hour, now = at(10), at(10, 35)
    rows = [("A", 1, at(9, 30), at(10, 20)),   # in the hour: 10:00-10:20 on GPU 1
            ("B", 2, at(10, 5), None),         # in the hour, still held: 10:05-10:35 on GPU 2
            ("old", 2**40, at(1), at(2)),      # ended before the hour: never read
            ("J", 2**40, at(2), at(3))]        # J's only device row, before the hour
    allocs = pl.LazyFrame(
        {"cluster": ["c1"] * 4, "job_id": [r[0] for r in rows], "gpu_id": [r[1] for r in rows],
         "start_time": [r[2] for r in rows], "end_time": [r[3] for r in rows], "gpu_fraction": [1.0] * 4},
        schema_overrides={"gpu_id": pl.Int64, "start_time": pl.Datetime("us"), "end_time": pl.Datetime("us")})
    # J runs through the hour but holds its device rows elsewhere: device-level, no piece here
    # (its rows outside the hour still count for that, by key). K has no device row at all: a
    # job-level piece 10:00-10:35 of 2 GPUs = 1.1667 GPU-hours. "early" ended before the hour.
    jb = jobs([{"job_id": "J", "project": "p", "start": at(2), "end": None},
               {"job_id": "K", "project": "p", "gpus": 2, "start": at(8), "end": None},
               {"job_id": "early", "project": "p", "gpus": 2, "start": at(1), "end": at(2)}])
    inv = gpus([{"gpu_id": 1}, {"gpu_id": 2}])
    with pytest.raises(pl.exceptions.InvalidOperationError):  # the poison works: a whole-window cut reads them
        allocated_pieces(allocs, inv, now=now, start=at(0), jobs=jb).collect()
    got = allocated_pieces(allocs, inv, now=now, start=hour, jobs=jb).collect().sort("job_id")
    assert got.select("job_id", "gpu_id", "piece_start", "piece_end").rows() == [
        ("A", 1, at(10), at(10, 20)), ("B", 2, at(10, 5), now), ("K", None, at(10), now)]
    assert got["gpu_hours_allocated"].to_list() == pytest.approx([20 / 60, 30 / 60, 2 * 35 / 60])
