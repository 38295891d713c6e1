"""A device's several series in one window (window_copies.merge_copies), by hand: runs one after
another (a pod ending, the next starting) add up; copies side by side (Slurm's per-job copies)
count once; the energy counter's last reading comes from the newest run."""

from __future__ import annotations

from datetime import UTC, datetime

import polars as pl
import pytest

from gpuledger.ingest.metrics.prometheus.decode import points_from_results
from gpuledger.ingest.metrics.prometheus.window_copies import COUNT, NEWEST, merge_copies

SM, ENERGY = "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
T = 1_796_169_600  # a window [T, T + 300) asked at its end, T + 300
GPU = {"gpu": "0", "UUID": "GPU-a", "Hostname": "n1", "modelName": "NVIDIA H100 80GB HBM3"}


def _window(*copies: tuple[dict, float, int, int, float]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Copies (extra labels, SM average, sample count, newest sample's offset s, energy mJ) of one
    device in the window, as the TSDB answers them, each family per series; the chunk also holds
    the window before, where the first copy alone has its full 5 samples (a 60-s scrape)."""
    answer = {SM: [], ENERGY: [], COUNT: [], NEWEST: []}
    for i, (labels, sm, n, newest, energy) in enumerate(copies):
        metric = {**GPU, **labels}
        for name, value, before in ((SM, sm, sm), (ENERGY, energy, 0.0), (COUNT, n, 5), (NEWEST, T + newest, T - 60)):
            values = [[T, str(before)]] if i == 0 else []
            answer[name].append({"metric": metric, "values": [*values, [T + 300, str(value)]]})
    points, series, rejects = points_from_results(answer, url="http://tsdb")
    assert rejects == []
    return points.with_columns(pl.col("ts") - pl.duration(seconds=300)), series


def _merged(points, series):
    merged, per_cell = merge_copies(points, series, {SM: "avg", ENERGY: "last"}, 300)
    window = pl.col("ts") == datetime.fromtimestamp(T, UTC).replace(tzinfo=None)  # not the window before
    merged, per_cell = merged.filter(window), per_cell.filter(window)
    values = dict(merged.select("metric", "value").iter_rows())
    labels = series.filter(pl.col("series") == merged["series"][0]).row(0, named=True)
    return values, per_cell.row(0, named=True), labels


def test_a_pod_ending_and_the_next_starting_in_one_window_add_up():
    # the old pod's 3 samples (0 % SM, the newest at +120 s) then the new pod's 2 (10 %, +240 s):
    # 5 samples in all, SM (3 x 0 + 2 x 0.1) / 5 = 0.04; the energy and the labels are the new pod's;
    # the window reaches 240 s after its start
    values, cell, labels = _merged(*_window(({"pod": "old"}, 0.0, 3, 120, 1000.0),
                                            ({"pod": "new"}, 0.1, 2, 240, 2000.0)))
    assert values[SM] == pytest.approx(0.04)
    assert values[ENERGY] == 2000.0
    assert (cell["sample_n"], cell["covered_ms"]) == (5, 240_000)
    assert labels["pod"] == "new"


def test_slurm_copies_side_by_side_count_once():
    # every sample copied per job on the GPU (the same readings, the same newest sample): 5, not 10
    values, cell, labels = _merged(*_window(({"hpc_job": "2"}, 0.5, 5, 240, 900.0),
                                            ({"hpc_job": "1"}, 0.5, 5, 240, 900.0)))
    assert (values[SM], cell["sample_n"], cell["covered_ms"]) == (0.5, 5, 240_000)
    assert labels["hpc_job"] == "1"  # the best copy, as the raw path ranks them


def test_a_job_ending_beside_one_running_on_counts_the_longer_run_once():
    # job 1 ran the whole window (5 samples); job 2's copies ended at +120 s (3): 8 > 5, the most a
    # window of this device holds, so they overlap and job 1's run stands for the window alone
    values, cell, labels = _merged(*_window(({"hpc_job": "1"}, 0.5, 5, 240, 900.0),
                                            ({"hpc_job": "2"}, 0.5, 3, 120, 800.0)))
    assert (values[SM], values[ENERGY], cell["sample_n"]) == (0.5, 900.0, 5)
    assert labels["hpc_job"] == "1"


def test_a_chunk_of_one_window_knows_a_full_window_from_the_count_before_it():
    # The pipelines ask a window or two a pass. The same pod change as above — 3 samples then 2 —
    # in a chunk holding this window alone: by itself it cannot tell runs one after another (3 + 2
    # <= a full window) from copies side by side (each a full window), and counts the larger run
    # only, 3. With the count asked before the chunk (windows.CONTEXT_WINDOWS: this device had 5
    # samples in a window), 3 + 2 = 5 <= 5: the runs add up, as in a day's chunk.
    points, series = _window(({"pod": "old"}, 0.0, 3, 120, 1000.0), ({"pod": "new"}, 0.1, 2, 240, 2000.0))
    window = pl.col("ts") == datetime.fromtimestamp(T, UTC).replace(tzinfo=None)
    alone = points.filter(window)
    _, cell = merge_copies(alone, series, {SM: "avg", ENERGY: "last"}, 300)
    assert cell["sample_n"].to_list() == [3]
    whole = pl.DataFrame({"gpu_uuid": ["GPU-a"], "mig_instance_id": [-1], "full": [5.0]},
                         schema_overrides={"mig_instance_id": series.schema["mig_instance_id"]})
    merged, cell = merge_copies(alone, series, {SM: "avg", ENERGY: "last"}, 300, whole=whole)
    assert cell.select("sample_n", "covered_ms").row(0) == (5, 240_000)
    assert dict(merged.select("metric", "value").iter_rows())[SM] == pytest.approx(0.04)


def test_a_device_that_changed_pods_in_every_window_takes_a_full_window_from_its_host():
    # The same pod change (3 samples then 2) in a chunk of this window alone, on a device whose pod
    # changed in every window of the hour before too: its own most in one series' window is 4
    # (whole: full 4), so by itself 3 + 2 = 5 > 4 reads as copies side by side (3 counted). Its host's
    # other GPU, scraped by the same exporter, had 5 in this window: a full window is 5, and the runs
    # add up to 5.
    other = {**GPU, "gpu": "1", "UUID": "GPU-b"}
    answer = {SM: [], ENERGY: [], COUNT: [], NEWEST: []}
    for metric, sm, n, newest, energy in (({**GPU, "pod": "old"}, 0.0, 3, 120, 1000.0),
                                          ({**GPU, "pod": "new"}, 0.1, 2, 240, 2000.0),
                                          (other, 0.5, 5, 240, 500.0)):
        for name, value in ((SM, sm), (ENERGY, energy), (COUNT, n), (NEWEST, T + newest)):
            answer[name].append({"metric": metric, "values": [[T + 300, str(value)]]})
    points, series, rejects = points_from_results(answer, url="http://tsdb")
    assert rejects == []
    points = points.with_columns(pl.col("ts") - pl.duration(seconds=300))
    whole = pl.DataFrame({"gpu_uuid": ["GPU-a"], "mig_instance_id": [-1], "full": [4.0]},
                         schema_overrides={"mig_instance_id": series.schema["mig_instance_id"]})
    _, cell = merge_copies(points, series, {SM: "avg", ENERGY: "last"}, 300, whole=whole)
    by_gpu = dict(cell.select("gpu_uuid", "sample_n").iter_rows())
    assert by_gpu == {"GPU-a": 5, "GPU-b": 5}
