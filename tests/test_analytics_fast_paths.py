"""The analytics' fast paths give what the plain paths give, on a simulated cluster.

- ``load.load_samples_for_hours`` finds the partial GPU-hours' samples with one integer key per
  (gpu_id, hour) instead of joining on (gpu_id, date_trunc('hour', ts)): same rows, same order.
- attribution from the rollup + those samples equals attribution from every raw sample.
- the in-memory engine the entry points collect with (analytics.collect) gives the streaming
  engine's figures.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from gpuledger.analytics.attribution import allocated_pieces, attribute_usage, partial_hour_keys
from gpuledger.analytics.collect import collect
from gpuledger.analytics.load import ATTRIBUTION_SAMPLE_COLS, load_hourly, load_samples_for_hours, load_tables

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


def test_integer_key_loader_equals_the_date_trunc_join(sim_con):
    con, frames, everything = sim_con
    keys = _keys(frames)
    # The simulated jobs start and end mid-hour, so there are partial GPU-hours to look up.
    assert keys.height > 0
    got = collect(load_samples_for_hours(con, keys))
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


def test_loader_handles_no_keys_and_an_unknown_device(sim_con):
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


def test_in_memory_engine_gives_the_streaming_figures(sim_con):
    con, frames, _ = sim_con
    j, a, g = frames["jobs"], frames["job_allocations"], frames["gpus"]
    plan = attribute_usage(a, g, load_samples_for_hours(con, _keys(frames)), now=NOW, start=START, end=NOW,
                           jobs=j, hourly=load_hourly(con, start=START, end=NOW))
    fast, plain = collect(plan), plan.collect(engine="streaming")
    assert_frame_equal(fast.sort(KEY, nulls_last=True), plain.sort(KEY, nulls_last=True), abs_tol=1e-9)
