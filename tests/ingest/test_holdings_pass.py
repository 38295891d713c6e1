"""The incremental holdings pass (issue 41): each cluster's pass links only the holdings seen since
its checkpoint (less LATE), on a real DuckDB warehouse; the CLI's `ingest link-devices` without a
range runs the same pass from the same checkpoints; a re-run changes no allocation."""

from __future__ import annotations

import datetime as dt

import polars as pl
import pytest
from typer.testing import CliRunner

from gpuledger import warehouse
from gpuledger.cli import app
from gpuledger.ingest.holdings.store import (
    FIRST_LOOKBACK,
    LATE,
    PASS_SOURCE,
    holdings_frame,
    holdings_pass,
    pass_scope,
    write_holdings,
)

T0 = dt.datetime(2026, 11, 20, 12, 0)
M = dt.timedelta(minutes=1)


def _holding(cluster, pod, host, uuid, first, last, *, ended=False):
    return {"cluster": cluster, "source": "pod-resources", "scheduler_job": f"ml/{pod}", "host": host,
            "device_id": uuid, "first_seen": first, "last_seen": last, "ended": ended, "gpu_uuid": uuid,
            "pod_uid": f"uid-{pod}", "namespace": "ml", "pod": pod, "resource": "nvidia.com/gpu"}


def _warehouse(path):
    inv = pl.DataFrame({"cluster": ["east", "east", "west"], "gpu_uuid": ["GPU-e0", "GPU-e1", "GPU-w0"],
                        "mig_instance_id": [-1, -1, -1], "host": ["e1", "e1", "w1"], "gpu_index": [0, 1, 0],
                        "model": ["H100"] * 3})
    jobs = [("east", "a", T0 - 2 * dt.timedelta(days=3)), ("east", "old", T0 - dt.timedelta(days=3)),
            ("west", "c", T0 - 30 * M)]
    with warehouse.open_writer(path) as con:
        ids = warehouse.register_gpus(con, inv)
        warehouse.upsert(con, "jobs", pl.DataFrame([
            {"cluster": c, "job_id": f"uid-{p}", "scheduler_job": f"ml/{p}", "project": "p", "gpu_model": "H100",
             "gpus": 1.0, "start_time": start, "end_time": None, "state": "Running", "source": "kubernetes",
             "updated_at": T0} for c, p, start in jobs]))
    return {r["gpu_uuid"]: r["gpu_id"] for r in ids.iter_rows(named=True)}


def _allocations(path) -> list[tuple]:
    with warehouse.open_reader(path) as con:
        return con.execute("SELECT cluster, job_id, gpu_id, start_time, end_time, source FROM job_allocations "
                           "ORDER BY ALL").fetchall()


def test_each_clusters_pass_reads_only_what_was_seen_since_its_checkpoint(warehouse_file):
    gid = _warehouse(warehouse_file)
    with warehouse.open_writer(warehouse_file) as con:
        write_holdings(con, holdings_frame([
            # ended three days ago, before the first pass's look-back: never read by a pass (its
            # writer linked it, or `link-devices --start --end` does)
            _holding("east", "old", "e1", "GPU-e1", T0 - dt.timedelta(days=3), T0 - dt.timedelta(days=2), ended=True),
            _holding("east", "a", "e1", "GPU-e0", T0 - dt.timedelta(days=6), T0),  # running for days, seen now
            _holding("west", "c", "w1", "GPU-w0", T0 - 30 * M, T0 - 5 * M),
        ]))
        east = holdings_pass(con, cluster="east")
        west = holdings_pass(con, cluster="west")
    # a first pass: the day before the cluster's newest holding; the six-day-old running one is seen now
    assert (east.since, east.position, east.holdings, east.links.linked) == (T0 - FIRST_LOOKBACK, T0, 1, 1)
    assert (west.since, west.position, west.holdings, west.links.linked) == (T0 - 5 * M - FIRST_LOOKBACK,
                                                                            T0 - 5 * M, 1, 1)
    first = _allocations(warehouse_file)
    assert first == [("east", "uid-a", gid["GPU-e0"], T0 - dt.timedelta(days=6), None, "pod-resources"),
                     ("west", "uid-c", gid["GPU-w0"], T0 - 30 * M, None, "pod-resources")]
    with warehouse.open_reader(warehouse_file) as con:
        stored = dict(con.execute("SELECT scope, position FROM ingest_checkpoints WHERE source = ?",
                                  [PASS_SOURCE]).fetchall())
    assert stored == {pass_scope("east"): T0.isoformat(), pass_scope("west"): (T0 - 5 * M).isoformat()}

    # nothing new: the next pass looks LATE behind its checkpoint and changes nothing
    with warehouse.open_writer(warehouse_file) as con:
        again = holdings_pass(con, cluster="east")
    assert (again.since, again.position, again.holdings) == (T0 - LATE, T0, 1)
    assert _allocations(warehouse_file) == first

    # the pod ends (the agent's next poll) and another starts on the second GPU: only they are read
    with warehouse.open_writer(warehouse_file) as con:
        write_holdings(con, holdings_frame([
            _holding("east", "a", "e1", "GPU-e0", T0 - dt.timedelta(days=6), T0 + 2 * M, ended=True),
            _holding("east", "old", "e1", "GPU-e1", T0 + M, T0 + 3 * M),  # a recreated pod of the old name
        ]))
        moved = holdings_pass(con, cluster="east")
    assert (moved.since, moved.position, moved.holdings, moved.links.linked) == (T0 - LATE, T0 + 3 * M, 2, 2)
    assert [r for r in _allocations(warehouse_file) if r[0] == "east"] == [
        ("east", "uid-a", gid["GPU-e0"], T0 - dt.timedelta(days=6), T0 + 2 * M, "pod-resources"),
        ("east", "uid-old", gid["GPU-e1"], T0 + M, None, "pod-resources")]


@pytest.mark.slow
def test_link_devices_without_a_range_runs_the_pass_of_every_cluster(warehouse_file):
    _warehouse(warehouse_file)
    with warehouse.open_writer(warehouse_file) as con:
        write_holdings(con, holdings_frame([_holding("east", "a", "e1", "GPU-e0", T0 - 10 * M, T0),
                                            _holding("west", "c", "w1", "GPU-w0", T0 - 10 * M, T0)]))
    runner = CliRunner()
    out = runner.invoke(app, ["ingest", "link-devices", "-w", str(warehouse_file)])
    assert out.exit_code == 0, out.output
    text = " ".join(out.output.split())
    for cluster in ("east", "west"):
        assert (f"cluster {cluster}: 1 holdings seen since 2026-11-19 12:00:00 UTC; 1 job x device intervals "
                f"linked, 0 waiting for their device, 0 for their job record; 0 label disagreements; checkpoint "
                f"2026-11-20 12:00:00 UTC") in text, text
    before = _allocations(warehouse_file)
    # the Python pass (the pipelines') continues from the CLI's checkpoint, and changes nothing
    with warehouse.open_writer(warehouse_file) as con:
        assert holdings_pass(con, cluster="east").since == T0 - LATE
    one = runner.invoke(app, ["ingest", "link-devices", "--cluster", "west", "-w", str(warehouse_file)])
    assert one.exit_code == 0 and "cluster east" not in one.output and "since 2026-11-20 11:45:00" in one.output
    assert _allocations(warehouse_file) == before
    half = runner.invoke(app, ["ingest", "link-devices", "--start", "2026-11-20", "-w", str(warehouse_file)])
    assert half.exit_code == 2 and "give both --start and --end" in " ".join(half.output.split())
