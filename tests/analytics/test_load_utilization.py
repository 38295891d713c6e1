"""Loading the warehouse into LazyFrames, and utilization by hour, model and workload kind."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

import pytest

from gpuledger import warehouse
from gpuledger.analytics.attribution import attribute_usage
from gpuledger.analytics.chargeback import chargeback_lines
from gpuledger.analytics.load import load_tables
from gpuledger.analytics.utilization import utilization_by_kind, utilization_hourly

T = lambda h, m=0: datetime(2026, 11, 2, h, m)  # noqa: E731


@pytest.fixture()
def small_warehouse(tmp_path):
    path = tmp_path / "wh.duckdb"
    with warehouse.open_writer(path) as con:
        con.execute("""
            INSERT INTO gpus (gpu_id, cluster, gpu_uuid, mig_instance_id, host, model, mig_profile, gpu_fraction)
            VALUES (1, 'c1', 'GPU-A', -1, 'n1', 'H100', NULL, 1.0),
                   (2, 'c1', 'GPU-M', 1, 'n1', 'H100', '1g.10gb', 1.0/7),
                   (3, 'c1', 'GPU-M', 2, 'n1', 'H100', '3g.40gb', 3.0/7)""")
        con.execute("""
            INSERT INTO jobs (cluster, job_id, project, user_name, kind, gpus, submit_time, start_time, end_time,
                              source, updated_at)
            VALUES ('c1', 'train', 'p', 'ann', 'training', 1, ?, ?, ?, 'test', ?),
                   ('c1', 'serve', 'p', 'bob', 'inference', 0.43, ?, ?, NULL, 'test', ?),
                   ('c1', 'old', 'p', 'bob', 'batch', 1, ?, ?, ?, 'test', ?)""",
                    [T(10), T(10), T(11), T(12), T(10), T(10), T(12), T(1), T(1), T(2), T(12)])
        con.execute("""
            INSERT INTO job_allocations (cluster, job_id, gpu_id, start_time, end_time, gpu_fraction) VALUES
              ('c1', 'train', 1, ?, ?, 1.0), ('c1', 'serve', 3, ?, NULL, 1.0), ('c1', 'old', 1, ?, ?, 1.0)""",
                    [T(10), T(11), T(10), T(1), T(2)])
        rows = []
        for m in range(60):
            rows.append((1, T(10, m), 0.5, None, 'test'))
            rows.append((3, T(10, m), None, 1.0, 'test'))
            rows.append((1, T(1, m), 0.9, None, 'test'))
        con.executemany("INSERT INTO gpu_samples (gpu_id, ts, sm_active_ratio, gr_engine_active_ratio, source) "
                        "VALUES (?, ?, ?, ?, ?)", rows)
        con.execute("INSERT INTO org_nodes VALUES ('acme', NULL, 'org', 1, NULL), ('p', 'acme', 'project', 1, NULL)")
        con.execute("INSERT INTO rate_card VALUES ('H100', 'reserved', '2026-01-01', 2.10, 'USD', 1.0)")
    return path


def test_load_restricts_to_the_time_range(small_warehouse):
    with warehouse.open_reader(small_warehouse) as con:
        t = load_tables(con, start=T(9), end=T(12))
        jobs = sorted(t.jobs.collect()["job_id"].to_list())
        samples = t.gpu_samples.collect()
        assert t.rate_card.collect()["price_per_gpu_hour"].to_list() == [Decimal("2.10")]
    assert jobs == ["serve", "train"]  # "old" ended at 02:00
    assert samples.height == 120 and samples["ts"].min() == T(10)


def test_utilization_hourly_and_by_kind(small_warehouse):
    with warehouse.open_reader(small_warehouse) as con:
        t = load_tables(con, start=T(10), end=T(11))
    att = attribute_usage(t.job_allocations, t.gpus, t.gpu_samples, now=T(11), start=T(10), end=T(11))
    u = utilization_hourly(att, t.gpus, start=T(10), end=T(11), by=()).collect().to_dicts()
    assert len(u) == 1
    # Two physical GPUs (GPU-A, GPU-M): 2 GPU-h of capacity. Allocated: train 1 + serve's 3g 3/7.
    # Active: 1 × 0.5 + 3/7 × 1.0. The 1g slice nobody holds is idle capacity.
    row = u[0]
    assert row["gpu_hours_capacity"] == pytest.approx(2.0)
    assert row["gpu_hours_allocated"] == pytest.approx(10 / 7)
    assert row["allocation_pct"] == pytest.approx(100 * (10 / 7) / 2)
    assert row["active_pct"] == pytest.approx(100 * (0.5 + 3 / 7) / 2)
    kinds = {r["kind"]: r for r in utilization_by_kind(att, t.jobs).collect().to_dicts()}
    assert kinds["training"]["gpu_hours_allocated"] == pytest.approx(1.0)
    assert kinds["training"]["active_of_allocated_pct"] == pytest.approx(50.0)
    assert kinds["inference"]["share_of_allocated_pct"] == pytest.approx(100 * (3 / 7) / (10 / 7))
    # And the same frames price: 2 GPUs × 1 h × 2.10 = 4.20 in all.
    lines = chargeback_lines(t.job_allocations, t.gpus, t.jobs, t.rate_card, start=T(10), end=T(11), now=T(11)).collect()
    assert lines["amount"].sum() == Decimal("4.20")
