"""The analytics' fast paths give what the plain paths give, on a simulated cluster.

- ``load.load_samples_for_hours`` finds the partial GPU-hours' samples with one scan branch per
  wanted hour (its gpu_id list bound), or one integer key per (gpu_id, hour),
  instead of joining on (gpu_id, date_trunc('hour', ts)): the same rows, both ways.
- attribution from the rollup + those samples equals attribution from every raw sample.
- the in-memory engine the entry points collect with (analytics.collect) gives the streaming
  engine's figures.
- ``load.load_device_activity`` judging the sustained window first gives the one pass over the
  whole lookback's evidence, at moments through the simulated day (jobs starting and ending,
  the simulator's gaps and dirt).
"""

from __future__ import annotations

from datetime import datetime, timedelta

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from gpuledger.analytics.attribution import allocated_pieces, attribute_usage, partial_hour_keys
from gpuledger.analytics.collect import collect
from gpuledger.analytics.load import (
    ATTRIBUTION_SAMPLE_COLS,
    load_device_activity,
    load_hourly,
    load_samples_for_hours,
    load_tables,
)

START = datetime(2026, 11, 1)
NOW = START + timedelta(hours=6)
KEY = ["cluster", "job_id", "gpu_id", "hour"]


@pytest.fixture(scope="module")
def sim_con(tmp_path_factory):
    from gpuledger import warehouse
    from gpuledger.config import load_config
    from gpuledger.simulator.scenario import build_cluster
    from gpuledger.simulator.to_warehouse import write_simulation

    sim = build_cluster(seed=5, gpus=16, start=START, days=0.25, interval_s=60, cluster="sim",
                        config=load_config(None), dirt=True)
    with warehouse.open_writer(tmp_path_factory.mktemp("fast") / "sim.duckdb") as c:
        write_simulation(c, sim, cells=4_000)
        t = load_tables(c, start=START, end=NOW, samples=True)
        frames = {name: collect(getattr(t, name)).lazy() for name in ("jobs", "job_allocations", "gpus")}
        yield c, frames, collect(t.gpu_samples)


def _keys(frames):
    return collect(partial_hour_keys(allocated_pieces(frames["job_allocations"], frames["gpus"], now=NOW,
                                                      start=START, end=NOW, jobs=frames["jobs"])))


@pytest.fixture(params=["per-hour branches", "integer-key semi join"])
def loader_path(request, monkeypatch):
    from gpuledger.analytics import load

    # Which path a lookup takes is a cost estimate (load._branches_pay); force each one here.
    if request.param == "integer-key semi join":
        monkeypatch.setattr(load, "MAX_HOUR_BRANCHES", 0)
    else:
        monkeypatch.setattr(load, "ROWS_PER_BRANCH", -1)
    return request.param


def test_loader_equals_the_date_trunc_join(sim_con, loader_path):
    con, frames, everything = sim_con
    keys = _keys(frames)
    # The simulated jobs start and end mid-hour, so there are partial GPU-hours to look up.
    assert keys.height > 0
    got = collect(load_samples_for_hours(con, keys)).sort("gpu_id", "ts")  # in no set order
    con.register("_k", keys.select(pl.col("gpu_id").cast(pl.Int32), pl.col("hour").cast(pl.Datetime("us")))
                 .to_arrow())
    try:  # the previous query, as it was
        cols = ", ".join("s." + c.strip() for c in ATTRIBUTION_SAMPLE_COLS.split(","))
        old = con.sql(f"SELECT {cols} FROM gpu_samples s SEMI JOIN _k w ON s.gpu_id = w.gpu_id "
                      "AND date_trunc('hour', s.ts) = w.hour ORDER BY s.gpu_id, s.ts").pl()
    finally:
        con.unregister("_k")
    assert 0 < old.height < everything.height
    assert_frame_equal(got, old)
    # Every row is in a wanted hour and none of a wanted hour is missing.
    in_keys = everything.with_columns(hour=pl.col("ts").dt.truncate("1h")).join(
        keys.select(pl.col("gpu_id").cast(pl.Int32), "hour"), on=["gpu_id", "hour"], how="semi")
    assert got.height == in_keys.height


def test_loader_handles_no_keys_and_an_unknown_device(sim_con, loader_path):
    con, _, _ = sim_con
    empty = pl.DataFrame(schema={"gpu_id": pl.Int32, "hour": pl.Datetime("us")})
    assert collect(load_samples_for_hours(con, empty)).height == 0
    # gpu_id 2^31 − 1 has no samples: the key arithmetic does not overflow into another device.
    odd = pl.DataFrame({"gpu_id": [2**31 - 1], "hour": [START]}, schema=empty.schema)
    assert collect(load_samples_for_hours(con, odd)).height == 0


def test_attribution_from_the_warehouse_equals_from_every_sample(sim_con):
    con, frames, everything = sim_con
    j, a, g = frames["jobs"], frames["job_allocations"], frames["gpus"]
    expected = collect(attribute_usage(a, g, everything.lazy(), now=NOW, start=START, end=NOW, jobs=j))
    partial = load_samples_for_hours(con, _keys(frames))
    got = collect(attribute_usage(a, g, partial, now=NOW, start=START, end=NOW, jobs=j,
                                  hourly=load_hourly(con, start=START, end=NOW)))
    assert got.height == expected.height > 0
    assert_frame_equal(got.sort(KEY, nulls_last=True), expected.sort(KEY, nulls_last=True),
                       check_dtypes=False, abs_tol=1e-9)


def test_attribution_with_the_callers_pieces_equals_cutting_them_again(sim_con):
    con, frames, _ = sim_con
    j, a, g = frames["jobs"], frames["job_allocations"], frames["gpus"]
    pieces = collect(allocated_pieces(a, g, now=NOW, start=START, end=NOW, jobs=j))
    partial = load_samples_for_hours(con, partial_hour_keys(pieces.lazy()))
    hourly = load_hourly(con, start=START, end=NOW)
    again = collect(attribute_usage(a, g, partial, now=NOW, start=START, end=NOW, jobs=j, hourly=hourly))
    given = collect(attribute_usage(a, g, partial, now=NOW, start=START, end=NOW, jobs=j, hourly=hourly,
                                    pieces=pieces))
    assert given.height == again.height > 0
    assert_frame_equal(given.sort(KEY, nulls_last=True), again.sort(KEY, nulls_last=True), check_exact=True)


def test_single_pieces_taken_as_they_are_equal_the_group_by(sim_con, monkeypatch):
    # attribute_usage takes a (job, GPU, hour) of one piece row by row and sums only the keys of
    # several (a job holding a device through two allocation rows in an hour): the same digits as
    # sending every key through the group-by, here with keys of both kinds (the allocation row of
    # one job and device split in two, each half the fraction, the second 20 minutes later).
    from gpuledger.analytics import attribution

    con, frames, _ = sim_con
    j, a, g = frames["jobs"], frames["job_allocations"], frames["gpus"]
    first = collect(a).row(0, named=True)
    halves = pl.DataFrame([{**first, "gpu_fraction": 0.5}] * 2).with_columns(
        pl.Series("start_time", [first["start_time"], first["start_time"] + timedelta(minutes=20)]))
    a = pl.concat([collect(a).slice(1), halves.cast(collect(a).schema)]).lazy()
    partial = load_samples_for_hours(con, partial_hour_keys(allocated_pieces(a, g, now=NOW, start=START, end=NOW,
                                                                             jobs=j)))
    hourly = load_hourly(con, start=START, end=NOW)
    results = {}
    for as_they_are in (True, False):
        monkeypatch.setattr(attribution, "SINGLE_PIECES_AS_THEY_ARE", as_they_are)
        results[as_they_are] = collect(attribute_usage(a, g, partial, now=NOW, start=START, end=NOW, jobs=j,
                                                       hourly=hourly)).sort(KEY, nulls_last=True)
    fast, reference = results[True], results[False]
    pieces = collect(allocated_pieces(a, g, now=NOW, start=START, end=NOW, jobs=j))
    assert pieces.select(pl.struct(KEY).is_duplicated().sum()).item() > 0  # keys of several pieces
    assert pieces.height > reference.height > 0
    assert_frame_equal(fast, reference, check_exact=True)


@pytest.mark.parametrize("statements", ["rows and count in one", "counts apart"])
def test_load_hourly_reads_a_fresh_rollup_and_recomputes_a_stale_one(sim_con, monkeypatch, statements):
    from gpuledger.warehouse.rollups import rollup_frame

    from gpuledger.analytics import load

    if statements == "counts apart":
        monkeypatch.setattr(load, "ONE_STATEMENT_SPAN", timedelta(0))
    con, _, everything = sim_con
    start, end = START + timedelta(hours=2), START + timedelta(hours=4, minutes=30)
    # [start − 1 h, end) in whole hours: 01:00-05:00, every sample of which the rollup counts.
    fresh = collect(load_hourly(con, start=start, end=end)).sort("gpu_id", "hour")
    in_span = everything.filter((pl.col("ts") >= START + timedelta(hours=1)) & (pl.col("ts") < START + timedelta(hours=5)))
    assert fresh["s_n"].sum() == in_span.height > 0
    assert_frame_equal(fresh, collect(rollup_frame(con, START + timedelta(hours=1), end)).sort("gpu_id", "hour"),
                       check_dtypes=False, abs_tol=1e-9)
    con.execute("BEGIN TRANSACTION")
    try:  # one device-hour missing from the rollup: recomputed from the samples, not read short
        con.execute("DELETE FROM gpu_hourly WHERE hour = $h AND gpu_id = (SELECT min(gpu_id) FROM gpu_hourly)",
                    {"h": START + timedelta(hours=3)}).fetchall()
        stale = collect(load_hourly(con, start=start, end=end)).sort("gpu_id", "hour")
    finally:
        con.execute("ROLLBACK")
    assert_frame_equal(stale, fresh, check_dtypes=False, abs_tol=1e-9)


def test_load_hourly_reads_a_rollup_of_window_aggregates_as_it_is(sim_con, monkeypatch):
    # Rows that stand for 3 raw samples each (sample_n, as `ingest prometheus --aggregate`
    # stores): the rollup's s_n is 3 x the rows, which is what the check must count too; it
    # counted rows, found a mismatch every time and recomputed a week from the samples.
    from gpuledger.analytics import load
    from gpuledger.warehouse.db import transaction
    from gpuledger.warehouse.rollups import refresh_gpu_hourly, rollup_frame

    con, _, everything = sim_con

    class Undo(Exception):  # leaves the module's warehouse as it was (transaction rolls back)
        pass

    with pytest.raises(Undo), transaction(con):
        con.execute("UPDATE gpu_samples SET sample_n = 3").fetchall()
        refresh_gpu_hourly(con, START, NOW)
        stored = collect(rollup_frame(con, START, NOW)).sort("gpu_id", "hour")

        def recomputed(*_a, **_k):
            raise AssertionError("load_hourly recomputed a fresh rollup of weighted rows")

        monkeypatch.setattr(load, "rollup_frame", recomputed)
        for span in (timedelta(0), timedelta(days=1)):  # counts apart, and rows and count in one
            monkeypatch.setattr(load, "ONE_STATEMENT_SPAN", span)
            got = collect(load_hourly(con, start=START + timedelta(hours=1), end=NOW)).sort("gpu_id", "hour")
            assert got["s_n"].sum() == 3 * everything.height > 0
            assert_frame_equal(got, stored, check_dtypes=False, abs_tol=1e-9)
        raise Undo


def test_in_memory_engine_gives_the_streaming_figures(sim_con):
    con, frames, _ = sim_con
    j, a, g = frames["jobs"], frames["job_allocations"], frames["gpus"]
    plan = attribute_usage(a, g, load_samples_for_hours(con, _keys(frames)), now=NOW, start=START, end=NOW,
                           jobs=j, hourly=load_hourly(con, start=START, end=NOW))
    fast, plain = collect(plan), plan.collect(engine="streaming")
    assert_frame_equal(fast.sort(KEY, nulls_last=True), plain.sort(KEY, nulls_last=True), abs_tol=1e-9)


@pytest.mark.parametrize("hours", [0.75, 1.5, 2 + 17 / 60, 3.5, 4 + 1 / 120, 6])
def test_squatting_evidence_sustained_window_first_equals_one_pass(sim_con, monkeypatch, hours):
    from gpuledger.analytics import load
    from gpuledger.config import SquattingPolicy

    con, frames, _ = sim_con
    j, a, g = frames["jobs"], frames["job_allocations"], frames["gpus"]
    now = START + timedelta(hours=hours)
    # A 45-minute grace and a 50-minute window judge devices the default policy leaves for later.
    for policy in (SquattingPolicy(), SquattingPolicy(grace_minutes=45, sustained_minutes=50)):
        monkeypatch.setattr(load, "SUSTAINED_FIRST", True)
        first = collect(load_device_activity(con, j, a, g, now=now, policy=policy))
        monkeypatch.setattr(load, "SUSTAINED_FIRST", False)
        reference = collect(load_device_activity(con, j, a, g, now=now, policy=policy))
        assert reference.height > 0 or policy.grace_minutes == 45  # none judged yet at 45 min
        assert_frame_equal(first.sort("cluster", "job_id", "gpu_id"), reference.sort("cluster", "job_id", "gpu_id"))


def _plain_demand(jobs: pl.LazyFrame, *, start, end, now) -> pl.DataFrame:
    # What fairshare.delivery computed before demand.demand_hourly: every job cut into hours.
    from gpuledger.analytics.intervals import split_by_hour

    cols = jobs.select("project", "gpus", "end_time", pl.coalesce("submit_time", "start_time").alias("submit_time"))
    return collect(split_by_hour(cols.filter(pl.col("submit_time").is_not_null()), start_col="submit_time",
                                 end_col="end_time", now=now, start=start, end=end)
                   .group_by("project", "hour").agg(gpu_hours_demand=(pl.col("gpus") * pl.col("piece_s") / 3600.0)
                                                    .sum()))


def _same_demand(got: pl.DataFrame, want: pl.DataFrame) -> None:
    key = ["project", "hour"]
    nonzero = pl.col("gpu_hours_demand") != 0
    assert_frame_equal(got.filter(nonzero).sort(key), want.filter(nonzero).sort(key), check_dtypes=False,
                       rel_tol=1e-12, abs_tol=1e-12)


def test_demand_by_steps_equals_demand_by_pieces_on_a_simulated_cluster(sim_con):
    from gpuledger.analytics.demand import demand_hourly

    _, frames, _ = sim_con
    j = frames["jobs"]
    # The whole range, and one whose edges and "now" fall inside hours.
    for start, end, now in ((START, NOW, NOW), (START + timedelta(minutes=17), NOW - timedelta(minutes=43),
                                                 NOW - timedelta(hours=1, minutes=5))):
        want = _plain_demand(j, start=start, end=end, now=now)
        assert want.height > 0
        _same_demand(collect(demand_hourly(j, start=start, end=end, now=now)), want)


def test_demand_by_hand():
    from gpuledger.analytics.demand import demand_hourly

    at = lambda h, m=0: START + timedelta(hours=h, minutes=m)
    j = pl.LazyFrame({
        "project": ["p", "p", "q", "q", "r"],
        "gpus": [2.0, 0.5, 1.0, 3.0, 1.0],
        # p: 2 GPUs 00:30-03:00 (a head, two whole hours); 0.5 GPU 01:00-01:15 (inside an hour).
        # q: 1 GPU 01:00-∞ (queued, never ended: until now 03:20); 3 GPUs 02:10-02:40 submitted.
        # r: neither submit nor start time: never counted.
        "submit_time": [at(0, 30), at(1), at(1), at(2, 10), None],
        "start_time": [at(1), at(1), None, at(2, 20), None],
        "end_time": [at(3), at(1, 15), None, at(2, 40), at(2)],
    })
    got = collect(demand_hourly(j, start=at(0), end=at(4), now=at(3, 20)))
    rows = {(r["project"], r["hour"]): r["gpu_hours_demand"] for r in got.to_dicts()}
    # p: hour 0: 2 × 0.5 = 1; hour 1: 2 + 0.5 × 0.25 = 2.125; hour 2: 2.
    # q: hour 1: 1; hour 2: 1 + 3 × 0.5 = 2.5; hour 3: 1 × 20/60 = 1/3.
    assert rows == pytest.approx({("p", at(0)): 1.0, ("p", at(1)): 2.125, ("p", at(2)): 2.0,
                                  ("q", at(1)): 1.0, ("q", at(2)): 2.5, ("q", at(3)): 1 / 3})
    _same_demand(got, _plain_demand(j, start=at(0), end=at(4), now=at(3, 20)))


def test_branches_pay_only_when_they_skip_enough_samples(sim_con, monkeypatch):
    from gpuledger.analytics import load

    con, _, _ = sim_con
    # Wanting hours 0 and 5 of the 6: two branches skip hours 1-4, which the one semi join over
    # the span 00:00-06:00 would read. They pay when each costs less than half of those samples.
    per_hour = dict(con.execute("SELECT hour, sum(s_n) FROM gpu_hourly GROUP BY hour").fetchall())
    skipped = sum(n for h, n in per_hour.items() if START + timedelta(hours=1) <= h < START + timedelta(hours=5))
    assert skipped > 0
    two = pl.Series("hour", [START, START + timedelta(hours=5)], dtype=pl.Datetime("us"))
    monkeypatch.setattr(load, "ROWS_PER_BRANCH", (skipped - 1) / 2)
    assert load._branches_pay(con, two)
    monkeypatch.setattr(load, "ROWS_PER_BRANCH", skipped / 2)
    assert not load._branches_pay(con, two)
    # One wanted hour skips nothing; no hours, nothing to branch on.
    monkeypatch.setattr(load, "ROWS_PER_BRANCH", 0)
    assert not load._branches_pay(con, two[:1])
    assert not load._branches_pay(con, two[:0])
