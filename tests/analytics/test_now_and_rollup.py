"""'Now' ignores rows stamped in the future; usage by node is exact, deterministic and the sum of
its projects (issue 8, items 14 and 15)."""

from __future__ import annotations

from datetime import datetime

import polars as pl

from gpuledger import warehouse
from gpuledger.analytics import queries
from gpuledger.analytics.attribution import rollup_usage
from tests.helpers.analytics_frames import at, jobs, org

WALL = datetime(2026, 11, 20, 12, 0)


def _job(job_id, start, end=None):
    return {"cluster": "c1", "job_id": job_id, "project": "p1", "gpus": 1.0, "start_time": start,
            "end_time": end, "source": "jobs-csv", "updated_at": WALL}


def test_now_is_the_newest_event_not_in_the_future(warehouse_file):
    with warehouse.open_writer(warehouse_file) as con:
        warehouse.upsert(con, "jobs", pl.DataFrame([
            _job("ok", datetime(2026, 11, 18, 8), datetime(2026, 11, 19, 6)),
            # One row whose end lies a year ahead: today it drags "now" to the wall clock.
            _job("bad", datetime(2026, 11, 18, 9), datetime(2027, 11, 19, 6)),
        ]))
        # The newest event at or before the wall clock is ok's end (19th 06:00); bad's start
        # (18th 09:00) is older and its end is in the future, so it does not count.
        assert queries.data_now(con, wall=WALL) == datetime(2026, 11, 19, 6)
        # With nothing at all, "now" is the wall clock.
        con.execute("DELETE FROM jobs")
        assert queries.data_now(con, wall=WALL) == WALL


TREE = org([("acme", None, 1), ("A", "acme", 1), ("a1", "A", 1), ("a2", "A", 1), ("b", "acme", 1)])


def _attribution(rows):
    return pl.LazyFrame(
        {"cluster": ["c1"] * len(rows), "job_id": [r[0] for r in rows], "gpu_id": list(range(len(rows))),
         "hour": [at(0)] * len(rows), "gpu_hours_allocated": [r[1] for r in rows],
         "gpu_hours_active": [r[2] for r in rows], "gpu_hours_idle": [r[1] - r[2] for r in rows],
         "gpu_hours_unknown": [r[3] for r in rows], "energy_kwh": [r[4] for r in rows]},
        schema_overrides={"energy_kwh": pl.Float64, "gpu_id": pl.Int32},
    )


def test_usage_by_node_is_exact_and_the_sum_of_its_projects():
    jb = jobs([{"job_id": "J1", "project": "a1", "start": at(0)},
               {"job_id": "J2", "project": "a2", "start": at(0)},
               {"job_id": "J3", "project": "b", "start": at(0)}])
    # Tenths do not add up exactly in binary floats: (0.1 + 0.2) + 0.3 = 0.6000000000000001,
    # 0.1 + (0.2 + 0.3) = 0.6, so a float sum depends on the order a parallel group-by picks.
    att = _attribution([("J1", 0.1, 0.1, 0.0, None), ("J2", 0.2, 0.1, 0.1, 0.7), ("J3", 0.3, 0.1, 0.2, None)])
    by_node = {r["node"]: r for r in rollup_usage(att, jb, by="node", org_nodes=TREE).collect().to_dicts()}
    by_project = {r["project"]: r for r in rollup_usage(att, jb, by="project").collect().to_dicts()}
    # Allocated: A = 0.1 + 0.2 = 0.3, acme = 0.1 + 0.2 + 0.3 = 0.6, exactly (decimal).
    assert by_node["A"]["gpu_hours_allocated"] == 0.3
    assert by_node["acme"]["gpu_hours_allocated"] == 0.6
    # Active 0.1 each: A 0.2, acme 0.3; unknown: A 0.1, acme 0.1 + 0.2 = 0.3.
    assert (by_node["acme"]["gpu_hours_active"], by_node["acme"]["gpu_hours_unknown"]) == (0.3, 0.3)
    assert by_node["A"]["gpu_hours_unknown"] == 0.1
    for leaf in ("a1", "a2", "b"):
        assert by_node[leaf] == {"node": leaf, **{k: v for k, v in by_project[leaf].items() if k != "project"}}
    # Energy: only J2 has any (0.7 kWh); b and a1 have none, which is unknown, not 0 kWh.
    assert by_node["a1"]["energy_kwh"] is None and by_node["b"]["energy_kwh"] is None
    assert by_node["A"]["energy_kwh"] == 0.7 and by_node["acme"]["energy_kwh"] == 0.7


def test_usage_by_node_is_the_same_on_every_run():
    # Many small float pieces over many rows: a float sum in parallel partitions varies in the last
    # digits; the exact sum does not. 3000 pieces of 0.1 GPU-hour each over a1, a2, b.
    n = 3000
    projects = ("a1", "a2", "b")
    jb = jobs([{"job_id": f"J{i}", "project": projects[i % 3], "start": at(0)} for i in range(n)])
    att = _attribution([(f"J{i}", 0.1, 0.03, 0.01, 0.001) for i in range(n)])
    runs = {tuple(sorted((r["node"], r["gpu_hours_allocated"], r["gpu_hours_active"], r["gpu_hours_unknown"])
                         for r in rollup_usage(att, jb, by="node", org_nodes=TREE).collect().to_dicts()))
            for _ in range(5)}
    assert len(runs) == 1
    got = {node: (alloc, active, unknown) for node, alloc, active, unknown in runs.pop()}
    # acme: 3000 × 0.1 = 300 allocated, × 0.03 = 90 active, × 0.01 = 30 unknown; each project 1000 pieces.
    assert got["acme"] == (300.0, 90.0, 30.0)
    assert got["a1"] == (100.0, 30.0, 10.0)
    assert got["A"] == (200.0, 60.0, 20.0)


def test_usage_report_orders_ties_by_key(warehouse_file):
    # Two projects with the same allocated hours print in name order on every run.
    with warehouse.open_writer(warehouse_file) as con:
        warehouse.upsert(con, "jobs", pl.DataFrame([
            {**_job("j2", datetime(2026, 11, 1)), "project": "zeta", "end_time": datetime(2026, 11, 1, 2)},
            {**_job("j1", datetime(2026, 11, 1)), "project": "alpha", "end_time": datetime(2026, 11, 1, 2)},
        ]))
        out = queries.usage_report(con, start=datetime(2026, 11, 1), end=datetime(2026, 11, 2), by="project",
                                   now=datetime(2026, 11, 2))
    assert out["project"].to_list() == ["alpha", "zeta"]
    assert out["gpu_hours_allocated"].to_list() == [2.0, 2.0]
