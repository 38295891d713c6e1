"""The fleet benchmark's preparation (benchmarks/fleet_bench.py): rows marked as 5-minute aggregates
a day per transaction give the rollup one rebuild from scratch gives, a stopped run resumes, and
``--in-place`` measures the file itself without a copy (a 30-day fleet warehouse is ~11 GiB)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest
from gpuledger.warehouse.rollups import refresh_gpu_hourly, rollup_frame
from polars.testing import assert_frame_equal

from benchmarks import analytics_bench, fleet_bench
from gpuledger import warehouse
from gpuledger.simulator import build_cluster
from gpuledger.simulator.to_warehouse import write_simulation

START = datetime(2026, 11, 1)
DAYS = 2.5  # two whole days and a half: the last step is a partial day


@pytest.fixture
def fleet(tmp_path):
    path = tmp_path / "fleet.duckdb"
    sim = build_cluster(seed=3, gpus=8, start=START, days=DAYS, interval_s=300)
    with warehouse.open_writer(path) as con:
        write_simulation(con, sim)
    return path


def _hourly(con):
    return con.sql("SELECT * FROM gpu_hourly ORDER BY gpu_id, hour").pl()


def _from_scratch(con):
    lo, hi = con.execute("SELECT min(ts), max(ts) FROM gpu_samples").fetchall()[0]
    cols = con.sql("SELECT * FROM gpu_hourly LIMIT 0").columns
    return rollup_frame(con, lo, hi + timedelta(seconds=1)).select(cols).sort("gpu_id", "hour").collect()


def test_marking_a_day_at_a_time_gives_the_rollup_of_one_rebuild_and_resumes(fleet):
    with warehouse.open_writer(fleet) as con:
        rows = con.execute("SELECT count(*) FROM gpu_samples").fetchall()[0][0]
        # a run stopped after its first day: that day marked, its rollup rebuilt, the rest not
        first = START + fleet_bench.MARK_STEP
        con.execute("UPDATE gpu_samples SET sample_n = 10 WHERE ts < $d", {"d": first}).fetchall()
        refresh_gpu_hourly(con, START, first)
        done_before = con.execute("SELECT count(*) FROM gpu_samples WHERE ts < $d", {"d": first}).fetchall()[0][0]
        assert 0 < done_before < rows

        assert fleet_bench.mark_as_aggregates(con) == rows - done_before  # only the rest
        assert con.execute("SELECT count(*) FILTER (WHERE sample_n = 10), count(*) FROM gpu_samples").fetchall()[0] \
            == (rows, rows)
        # s_n counts the raw samples the rows stand for: ten each
        assert con.execute("SELECT sum(s_n) FROM gpu_hourly").fetchall()[0][0] == 10 * rows
        marked = _hourly(con)
        assert_frame_equal(marked, _from_scratch(con), check_dtypes=False)

        assert fleet_bench.mark_as_aggregates(con) == 0  # a second run changes nothing
        assert_frame_equal(_hourly(con), marked)


def test_in_place_prepares_and_measures_the_file_itself_without_a_copy(fleet, tmp_path, monkeypatch):
    def no_copy(*_):
        raise AssertionError("--in-place copied the warehouse")

    monkeypatch.setattr(analytics_bench, "_copy_warehouse", no_copy)
    rows = fleet_bench.prepare_in_place(fleet)["rows"]
    assert fleet_bench.main(["--warehouse", str(fleet), "--in-place", "--prepare-only"])["rows_marked"] == 0

    out = tmp_path / "bench" / "fleet.json"
    fleet_bench.main(["--warehouse", str(fleet), "--in-place", "--repeat", "1", "--incremental-repeat", "1",
                      "--json", str(out)])
    res = json.loads(out.read_text())
    assert res["fleet"]["rows"] == rows and res["fleet"]["rows_marked"] == 0 and res["fleet"]["gpus"] == 8
    assert res["full_recompute_s"] > 0 and res["incremental_s"] > 0
    # no copy beside it (the writer's lock, gate and readers' files are the warehouse's own)
    assert not [p.name for p in tmp_path.iterdir() if p.is_dir() and p.name != "bench"]
    assert not [p.name for p in tmp_path.iterdir() if p.suffix == ".duckdb" and p != fleet]
    with warehouse.open_reader(fleet) as con:  # the file itself was measured: the mid-hour cut is in it
        assert con.execute("SELECT count(*) FROM gpu_samples").fetchall()[0][0] < rows


def test_prepare_only_needs_in_place(fleet):
    with pytest.raises(SystemExit):
        fleet_bench.main(["--warehouse", str(fleet), "--prepare-only"])
