"""The deterministic cluster simulator: determinism, idempotent warehouse writes, planted ground
truth (squatters, dirt), live /metrics endpoints and an OpenMetrics file promtool accepts."""

from __future__ import annotations

import shutil
import subprocess
import urllib.request
from datetime import datetime, timedelta

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal
from prometheus_client.parser import text_string_to_metric_families

from gpuledger import warehouse
from gpuledger.ingest.metrics import dcgm_fields as dcgm
from gpuledger.simulator import (
    build_cluster,
    fixed_clock,
    metrics_page,
    raw_samples,
    start_exporters,
    write_openmetrics,
    write_simulation,
)
from gpuledger.simulator.dirt import energy_reset_at

START = datetime(2026, 11, 1)


@pytest.fixture(scope="module")
def sim():
    # 64 GPUs = 8 nodes: MIG node, time-sliced node, upgraded exporters (nodes 3 and 7)
    return build_cluster(seed=7, gpus=64, start=START, days=1.0)


@pytest.fixture(scope="module")
def written(sim, tmp_path_factory):
    path = tmp_path_factory.mktemp("wh") / "w.duckdb"
    with warehouse.open_writer(path) as con:
        first = write_simulation(con, sim)
    with warehouse.open_writer(path) as con:
        second = write_simulation(con, sim)
    return path, first, second


def test_same_seed_same_frames(sim):
    again = build_cluster(seed=7, gpus=64, start=START, days=1.0)
    assert_frame_equal(sim.workload.jobs, again.workload.jobs)
    assert_frame_equal(sim.hardware.devices, again.hardware.devices)
    t0 = sim.start_s + 3 * 3600
    assert_frame_equal(raw_samples(sim, t0, t0 + 1800), raw_samples(again, t0, t0 + 1800))
    other = build_cluster(seed=8, gpus=64, start=START, days=1.0)
    assert not other.workload.jobs.equals(sim.workload.jobs)


def test_values_do_not_depend_on_chunking(sim):
    t0 = sim.start_s + 5 * 3600
    whole = raw_samples(sim, t0, t0 + 3600)
    halves = pl.concat([raw_samples(sim, t0, t0 + 1800), raw_samples(sim, t0 + 1800, t0 + 3600)])
    key = ["device_idx", "t"]
    assert_frame_equal(whole.sort(key), halves.sort(key))


def test_inventory_has_models_mig_and_shared(sim):
    dev = sim.hardware.devices
    assert set(dev["model"]) == {"H100", "B200", "B300"}
    mig = dev.filter(pl.col("mig_instance_id") >= 0)
    assert mig.height > 8 and set(mig["mig_profile"]) <= {"1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"}
    # each MIG GPU's instances add up to the whole GPU (7 slices)
    per_gpu = mig.group_by("gpu_uuid").agg(pl.col("gpu_fraction").sum())
    assert np.allclose(per_gpu["gpu_fraction"].to_numpy(), 1.0)
    jobs = sim.workload.jobs
    assert (jobs["gpus"] == 0.5).any(), "time-sliced half-GPU jobs expected"
    assert {"training", "fine-tune", "batch", "inference", "interactive"} <= set(jobs["kind"])
    assert (jobs["state"] == "FAILED").any()


@pytest.mark.slow
def test_rerun_changes_no_row_counts(written):
    _, first, second = written
    assert first == second
    assert first["gpu_samples"] > 100_000 and first["jobs"] > 50 and first["job_allocations"] > 50
    assert first["org_nodes"] > 5 and first["rate_card"] > 0


@pytest.mark.slow
def test_squatters_idle_with_memory_while_training_busy(sim, written):
    path, _, _ = written
    squatters = sim.workload.squatter_job_ids()
    # squatting is a behaviour (one notebook session in ten, demand.py): a day of 64 GPUs has few
    assert len(squatters) >= 1
    with warehouse.open_reader(path) as con:
        per_kind = con.sql(
            """
            SELECT CASE WHEN j.name LIKE 'squat-%' THEN 'squat' ELSE j.kind END AS what,
                   avg(s.sm_active_ratio) AS sm, avg(s.fb_used_bytes / s.fb_total_bytes) AS mem,
                   count(*) AS n
            FROM job_allocations a JOIN jobs j USING (cluster, job_id)
            JOIN gpu_samples s ON s.gpu_id = a.gpu_id AND s.ts >= a.start_time + INTERVAL 10 MINUTE
                 AND s.ts < coalesce(a.end_time, TIMESTAMP '9999-01-01')
            GROUP BY 1
            """
        ).pl()
    rows = {r["what"]: r for r in per_kind.to_dicts()}
    assert rows["squat"]["n"] > 100
    assert rows["squat"]["sm"] < 0.005 and rows["squat"]["mem"] > 0.6
    assert rows["training"]["sm"] > 0.6 and rows["training"]["n"] > 1000


def test_sentinels_never_reach_the_warehouse(sim, written):
    path, _, _ = written
    raw = pl.concat([raw_samples(sim, t, t + 6 * 3600) for t in range(sim.start_s, sim.end_s, 6 * 3600)])
    planted = raw.filter(pl.col("DCGM_FI_DEV_FB_USED") >= dcgm.SENTINEL_FLOOR).height
    assert planted > 0, "the raw stream should carry blanks"
    with warehouse.open_reader(path) as con:
        worst = con.execute(
            "SELECT max(sm_active_ratio), max(power_w), max(fb_used_bytes), max(energy_total_j),"
            " count(*) FILTER (WHERE fb_used_bytes IS NULL) FROM gpu_samples").fetchone()
    assert worst[0] <= 1.0 and worst[1] < 2000 and worst[2] < 400 * 2**30 and worst[3] < 1e13
    assert worst[4] >= planted  # blanks became NULL, not numbers


def test_gaps_and_host_spellings_are_cleaned(sim, written):
    path, _, _ = written
    raw = pl.concat([raw_samples(sim, t, t + 6 * 3600) for t in range(sim.start_s, sim.end_s, 6 * 3600)])
    hosts = set(raw.filter(pl.col("gpu_uuid") == raw.filter(pl.col("host").str.ends_with(".cluster.local"))
                           ["gpu_uuid"][0])["host"])
    assert len(hosts) == 2, f"one GPU under two host spellings, got {hosts}"
    slots = sim.hardware.n_devices * (sim.end_s - sim.start_s) // sim.interval_s
    assert raw.height < slots, "scrape gaps expected"
    with warehouse.open_reader(path) as con:
        stored = con.execute("SELECT count(*) FROM gpu_samples").fetchone()[0]
        hostnames = {r[0] for r in con.execute("SELECT DISTINCT host FROM gpus").fetchall()}
    assert stored == raw.select("device_idx", "t").unique().height
    assert all("." not in h for h in hostnames)


def test_energy_counter_resets_in_raw_stream(sim):
    reset = energy_reset_at(sim)
    phys = int(np.flatnonzero(reset < np.iinfo(np.int64).max)[0])
    at = int(reset[phys])
    dev = int(np.flatnonzero(sim.hardware.dev_phys == phys)[0])
    node = int(sim.hardware.dev_node[dev])
    raw = raw_samples(sim, at - 600, at + 600, nodes=[node]).filter(pl.col("device_idx") == dev).sort("t")
    energy = raw.filter(pl.col("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION") < dcgm.SENTINEL_FLOOR)[
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"].to_numpy()
    steps = np.diff(energy)
    assert (steps < 0).sum() == 1, "exactly one counter reset"
    assert (steps >= 0).sum() >= len(steps) - 1


def test_dcgm_catalog_converts_units_and_blanks():
    raw = pl.DataFrame({
        "host": ["Node-003.cluster.local", "node-003"],
        "DCGM_FI_DEV_GPU_UTIL": [55.0, float(dcgm.DCGM_INT32_BLANK)],
        "DCGM_FI_DEV_FB_USED": [1024.0, 2.0**63],
        "DCGM_FI_DEV_FB_FREE": [1024.0, 10.0],
        "DCGM_FI_DEV_FB_RESERVED": [0.0, 0.0],
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": [5000.0, 6000.0],
        "DCGM_FI_PROF_SM_ACTIVE": [0.5, dcgm.DCGM_FP64_BLANK],
    })
    out = dcgm.clean_wide(raw).collect()
    assert out["host"].to_list() == ["node-003", "node-003"]
    assert out["gpu_util_ratio"].to_list() == [0.55, None]
    assert out["fb_used_bytes"].to_list() == [1024 * 2**20, None]
    assert out["fb_total_bytes"].to_list() == [2048 * 2**20, None]
    assert out["energy_total_j"].to_list() == [5.0, 6.0]
    assert out["sm_active_ratio"].to_list() == [0.5, None]
    new = dcgm.clean_wide(pl.DataFrame({"DCGM_FI_DEV_FB_USED_BYTES": [3.0 * 2**20],
                                        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION_JOULES": [7.5]})).collect()
    assert new["fb_used_bytes"].to_list() == [3 * 2**20] and new["energy_total_j"].to_list() == [7.5]
    assert dcgm.unit_from_help("Framebuffer memory used (in MiB).") == "MiB"
    assert dcgm.canonical_host("10.0.0.3") == "10.0.0.3"


def _families(text):
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_served_metrics_carry_exporter_labels(sim):
    at = sim.start_s + 6 * 3600
    with start_exporters(sim, port=0, clock=fixed_clock(at)) as handle:
        assert len(handle.urls) == len(sim.hardware.node_host)
        pages = [urllib.request.urlopen(url, timeout=10).read().decode() for url in handle.urls]
    samples = [s for page in pages for f in _families(page).values() for s in f.samples]
    assert samples
    base = {"gpu", "UUID", "pci_bus_id", "device", "modelName", "DCGM_FI_DRIVER_VERSION"}
    assert all(base <= set(s.labels) for s in samples)
    assert all(("Hostname" in s.labels) != ("hostname" in s.labels) for s in samples)
    assert any("Hostname" in s.labels for s in samples) and any("hostname" in s.labels for s in samples)
    assert any({"GPU_I_PROFILE", "GPU_I_ID"} <= set(s.labels) for s in samples)
    assert any("hpc_job" in s.labels for s in samples)
    assert any({"namespace", "pod", "container"} <= set(s.labels) for s in samples)
    fams = _families(pages[0])
    assert fams["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"].type == "counter"
    assert "# HELP DCGM_FI_PROF_SM_ACTIVE" in pages[0] and "# TYPE DCGM_FI_DEV_GPU_UTIL gauge" in pages[0]
    # MIG instances read GPU util 0 and repeat their GPU's power
    mig = [s for page in pages for s in _families(page)["DCGM_FI_DEV_GPU_UTIL"].samples if "GPU_I_ID" in s.labels]
    assert mig and all(s.value == 0 for s in mig)
    power = {}
    for page in pages:
        for s in _families(page)["DCGM_FI_DEV_POWER_USAGE"].samples:
            if "GPU_I_ID" in s.labels:
                power.setdefault(s.labels["UUID"], set()).add(s.value)
    assert power and all(len(v) == 1 for v in power.values())


def test_served_values_match_the_warehouse(sim, written):
    path, _, _ = written
    at = sim.start_s + 8 * 3600
    page = metrics_page(sim, 0, at)
    sample = next(s for s in _families(page)["DCGM_FI_PROF_SM_ACTIVE"].samples)
    when = datetime(1970, 1, 1) + timedelta(seconds=at)
    with warehouse.open_reader(path) as con:
        stored = con.execute(
            "SELECT s.sm_active_ratio FROM gpu_samples s JOIN gpus g USING (gpu_id) "
            "WHERE g.gpu_uuid = ? AND g.mig_instance_id = -1 AND s.ts = ?",
            [sample.labels["UUID"], when]).fetchall()
    if stored and stored[0][0] is not None and sample.value < dcgm.SENTINEL_FLOOR:
        assert stored[0][0] == pytest.approx(sample.value)
    else:  # a planted gap or blank at that second; the page still parsed
        assert stored == [] or stored[0][0] is None or sample.value >= dcgm.SENTINEL_FLOOR


@pytest.mark.prometheus
def test_openmetrics_file_accepted_by_promtool(tmp_path):
    if shutil.which("promtool") is None:
        pytest.skip("promtool not installed (Debian package `prometheus`, scripts/install-test-deps.sh)")
    small = build_cluster(seed=3, gpus=32, start=START, days=2 / 24)
    out = tmp_path / "sim.om"
    with open(out, "w") as fh:
        n = write_openmetrics(small, fh, small.start_s, small.end_s)
    text = out.read_text()
    assert n > 1000 and text.endswith("# EOF\n")
    assert 'hostname="node-003.cluster.local"' in text and 'Hostname="node-003"' in text
    done = subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", str(out),
                           str(tmp_path / "blocks")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert str(n) in done.stdout  # the block summary lists every sample


def test_openmetrics_family_subset_streamed_holds_the_same_samples():
    """--metrics / --stream (the Prometheus side-by-side benchmark's week files): the streamed
    file of one family holds exactly that family's lines of the whole-span file, each series in
    time order; blanks=False drops exactly the blank-sentinel lines."""
    import io

    small = build_cluster(seed=3, gpus=16, start=START, days=3 / 24)
    family = "DCGM_FI_PROF_SM_ACTIVE"
    whole, streamed, no_blanks = io.StringIO(), io.StringIO(), io.StringIO()
    write_openmetrics(small, whole, small.start_s, small.end_s)
    n = write_openmetrics(small, streamed, small.start_s, small.end_s, metrics=[family], stream=True,
                          chunk_steps=100)  # 360 steps: chunks of 100, 100, 100, 60
    kept = write_openmetrics(small, no_blanks, small.start_s, small.end_s, metrics=[family], blanks=False)
    ours = [ln for ln in whole.getvalue().splitlines() if ln.startswith(family + "{")]
    lines = streamed.getvalue().splitlines()
    samples = [ln for ln in lines if not ln.startswith("#")]
    assert sorted(samples) == sorted(ours) and n == len(ours) > 0
    assert lines[-1] == "# EOF" and sum(ln.startswith("# TYPE") for ln in lines) == 1
    last: dict[str, int] = {}
    for ln in samples:  # per series, timestamps strictly increase across the interleaved chunks
        series, t = ln.rsplit("} ", 1)[0], int(ln.rsplit(" ", 1)[1])
        assert t > last.get(series, -1)
        last[series] = t
    blank = [ln for ln in ours if ln.split("} ")[1].split(" ")[0] == "9.223372036854776e+18"]
    assert kept == len(ours) - len(blank)
    with pytest.raises(ValueError, match="not an exported family"):
        write_openmetrics(small, io.StringIO(), small.start_s, small.end_s, metrics=["DCGM_FI_NOPE"])


def test_cli_commands_have_help():
    from typer.testing import CliRunner

    from gpuledger.cli.simulate import app

    runner = CliRunner()
    for command in ("warehouse", "serve", "openmetrics"):
        result = runner.invoke(app, [command, "--help"])
        assert result.exit_code == 0, result.output


def test_the_warehouse_names_the_seed_and_regime(written):
    """Every figure drawn from a simulated warehouse rests on its seed and demand regime: the
    summary says which (and a rerun of the window keeps one row)."""
    from gpuledger.analytics.queries import warehouse_summary

    path, first, second = written
    with warehouse.open_reader(path) as con:
        simulated = warehouse_summary(con)["simulated"]
    assert simulated == "seed 7, regime ai2-backlog"
    with warehouse.open_reader(path) as con:
        assert con.execute("SELECT scope FROM ingest_checkpoints WHERE source = 'simulator'").fetchall() == [
            ("sim 2026-11-01T00:00..2026-11-02T00:00",)]
    assert first["ingest_checkpoints"] == second["ingest_checkpoints"] == 1


def test_energy_from_the_cached_mean_activity_equals_the_per_chunk_lookup(sim, monkeypatch):
    # The per-allocation mean activity is computed once per workload (it was looked up again for
    # every allocation in every chunk: quadratic in the window at fleet sizes); the samples are the
    # same to the bit, for all nodes and for a subset of them.
    from gpuledger.simulator import signals

    t0 = sim.start_s + 7 * 3600
    nodes = np.array([0, 3])
    cached = [raw_samples(sim, t0, t0 + 1800), raw_samples(sim, t0, t0 + 1800, nodes)]
    assert signals.alloc_mean_activity(sim.workload) is signals.alloc_mean_activity(sim.workload)

    def per_chunk(wl):
        jobs = wl.alloc_job
        return np.vectorize(signals._MEAN_ACT.get, otypes=[float])(wl.job_behaviour[jobs]) * wl.job_level[jobs]

    monkeypatch.setattr(signals, "alloc_mean_activity", per_chunk)
    for got, want in zip(cached, [raw_samples(sim, t0, t0 + 1800), raw_samples(sim, t0, t0 + 1800, nodes)], strict=True):
        assert got["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"].n_unique() > 10
        assert_frame_equal(got, want)


def _first_lane_jobs_by_loop(ljob, rows, n_rows):
    job = np.full((n_rows, ljob.shape[1]), -1, dtype=np.int64)
    for k in range(len(ljob) - 1, -1, -1):  # the lowest lane writes last
        take = ljob[k] >= 0
        job[rows[k], take] = ljob[k, take]
    return job


def test_first_lane_jobs_equal_the_loop_over_lanes(sim):
    # the lanes of the simulated inventory (time-sliced GPUs have several per device), random jobs
    from gpuledger.simulator.signals import first_lane_jobs

    hw = sim.hardware
    rows = hw.lane_device.astype(np.int64)
    assert len(rows) > len(np.unique(rows))  # some device has several lanes
    rng = np.random.default_rng(3)
    for free in (0.0, 0.5, 1.0):
        ljob = np.where(rng.random((len(rows), 7)) < free, -1, rng.integers(0, 1000, (len(rows), 7)))
        got = first_lane_jobs(ljob, rows, hw.n_devices)
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, _first_lane_jobs_by_loop(ljob, rows, hw.n_devices))
    empty = np.zeros((0, 7), dtype=np.int64)
    np.testing.assert_array_equal(first_lane_jobs(empty, np.zeros(0, dtype=np.int64), 3), np.full((3, 7), -1))
