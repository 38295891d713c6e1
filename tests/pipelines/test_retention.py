"""The daily retention asset drops exactly what `warehouse.prune_raw_samples` drops: raw samples
older than policy.retention.raw_sample_days (counted back from the newest sample) whose hourly
rollup is complete; rollups stay. tests/warehouse/test_retention.py holds that reports of pruned
hours do not change."""

from __future__ import annotations

from datetime import datetime, timedelta

import dagster as dg

from gpuledger import warehouse
from gpuledger.config import example_config_text
from gpuledger.pipelines.defs.resources import GpuledgerConfig, Warehouse
from gpuledger.pipelines.defs.retention.assets import raw_sample_retention
from gpuledger.simulator import build_cluster
from gpuledger.simulator.to_warehouse import write_simulation

START = datetime(2026, 11, 1)


def test_retention_asset_prunes_old_raw_samples_and_keeps_rollups(tmp_path):
    config = tmp_path / "gpuledger.yaml"
    # keep 3 h of raw samples out of the 6 h simulated (0.125 days)
    example = example_config_text()
    text = example.replace("raw_sample_days: 35", "raw_sample_days: 0.125", 1)
    assert text != example  # the example states the retention
    config.write_text(text)
    path = tmp_path / "wh.duckdb"
    with warehouse.open_writer(path) as con:
        # seed 1: some device-hours before the mark have no allocation edge (on seed 3, since
        # sessions start at once or are given up, every one of the first two hours has one: all kept)
        write_simulation(con, build_cluster(seed=1, gpus=8, start=START, days=0.25))
        rollup_before = con.execute("SELECT count(*), sum(s_n) FROM gpu_hourly").fetchall()[0]
        total_before = con.execute("SELECT count(*) FROM gpu_samples").fetchall()[0][0]
    result = dg.materialize([raw_sample_retention], instance=dg.DagsterInstance.ephemeral(), resources={
        "warehouse": Warehouse(path=str(path)), "gpuledger_config": GpuledgerConfig(path=str(config))})
    assert result.success
    meta = result.asset_materializations_for_node("raw_sample_retention")[0].metadata
    # newest sample 05:59:30; minus 3 h = 02:59:30, whole hours below it: the mark is 02:00
    assert meta["pruned_before"].value == str(START + timedelta(hours=2))
    deleted = meta["rows_deleted"].value
    with warehouse.open_reader(path) as con:
        left_old = con.execute("SELECT count(*) FROM gpu_samples WHERE ts < ?",
                               [START + timedelta(hours=2)]).fetchall()[0][0]
        total_after = con.execute("SELECT count(*) FROM gpu_samples").fetchall()[0][0]
        rollup_after = con.execute("SELECT count(*), sum(s_n) FROM gpu_hourly").fetchall()[0]
    assert deleted > 0 and total_after == total_before - deleted
    assert left_old == meta["rows_kept_partial_hours"].value  # only allocation-edge hours stay raw
    assert rollup_after == rollup_before  # the hourly rollup keeps every pruned hour
