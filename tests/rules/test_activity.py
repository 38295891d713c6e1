"""The activity-signal rule (gpuledger.rules.activity): its polars and SQL forms over the same
cases, and the readers that had their own copy (the dashboards' device-hours query, the what-if
trace) now dropping GPU utilisation on MIG as the analytics do. A real DuckDB, the real schema."""

from __future__ import annotations

import math
from datetime import datetime, timedelta

import duckdb
import polars as pl
import pytest

from gpuledger.rules import activity
from gpuledger.warehouse.db import apply_migrations

NAN = float("nan")
T0 = datetime(2026, 11, 2, 8)

# Per-signal sums and counts of one device-hour, whether it is MIG, and the (signal, ratio) the rule
# gives, by hand: the best signal with a reading, its mean; gpu_util is no reading on MIG.
SUM_CASES = [
    # s_sm, n_sm, s_gr, n_gr, s_util, n_util, is_mig -> signal, ratio
    ((30.0, 60, 12.0, 60, 60.0, 60, False), ("sm_active", 0.5)),
    ((0.0, 0, 12.0, 60, 60.0, 60, False), ("gr_engine_active", 0.2)),
    ((0.0, 0, 0.0, 0, 45.0, 60, False), ("gpu_util", 0.75)),
    ((0.0, 0, 0.0, 0, 45.0, 60, True), (None, None)),  # MIG: utilisation is always 0 there
    ((0.0, 0, 6.0, 60, 0.0, 60, True), ("gr_engine_active", 0.1)),
    ((0.0, 0, 0.0, 0, 0.0, 0, False), (None, None)),
    ((0.0, 0, 0.0, 0, 45.0, 60, None), ("gpu_util", 0.75)),  # unknown: a whole GPU
]
COLUMNS = ["s_sm_active", "s_n_sm_active", "s_gr_engine_active", "s_n_gr_engine_active", "s_gpu_util",
           "s_n_gpu_util", "is_mig"]


def _sum_rows() -> pl.DataFrame:
    return pl.DataFrame([c for c, _ in SUM_CASES], schema=dict(zip(COLUMNS, [
        pl.Float64, pl.Int64, pl.Float64, pl.Int64, pl.Float64, pl.Int64, pl.Boolean], strict=True)), orient="row")


def test_sums_polars_and_sql_agree_with_the_hand_derived_cases():
    frame = _sum_rows()
    signal, ratio = activity.best_of_sums("s_", "s_n_", pl.col("is_mig"))
    by_polars = frame.select(signal.alias("signal"), ratio.alias("ratio")).rows()
    con = duckdb.connect()
    con.register("cases", frame.with_row_index("i").to_arrow())
    by_sql = con.execute(f"SELECT {activity.signal_of_sums_sql('h', 'h.is_mig')}, "
                         f"{activity.ratio_of_sums_sql('h', 'h.is_mig')} FROM cases h ORDER BY i").fetchall()
    expected = [want for _, want in SUM_CASES]
    for got in (by_polars, by_sql):
        assert [(s, None if r is None else round(r, 12)) for s, r in got] == expected


@pytest.mark.parametrize(("sm", "gr", "util", "is_mig", "want"), [
    (0.4, 0.2, 0.9, False, 0.4),
    (None, 0.2, 0.9, False, 0.2),
    (NAN, 0.2, 0.9, False, 0.2),  # NaN is no reading
    (None, None, 0.9, False, 0.9),
    (None, None, 0.9, True, None),  # MIG
    (None, NAN, 0.9, True, None),
    (None, None, None, False, None),
])
def test_one_sample_sql(sm, gr, util, is_mig, want):
    con = duckdb.connect()
    got = con.execute(f"SELECT {activity.sample_ratio_sql('s', '$mig')} FROM (SELECT $sm::DOUBLE AS "
                      "sm_active_ratio, $gr::DOUBLE AS gr_engine_active_ratio, $util::DOUBLE AS gpu_util_ratio) s",
                      {"sm": sm, "gr": gr, "util": util, "mig": is_mig}).fetchall()[0][0]
    assert got == want or (want is not None and math.isclose(got, want))


def test_is_mig_forms_agree():
    ids = [-1, 0, 3, None]
    frame = pl.DataFrame({"mig_instance_id": ids}, schema={"mig_instance_id": pl.Int32})
    con = duckdb.connect()
    con.register("g", frame.with_row_index("i").to_arrow())
    by_sql = [r[0] for r in con.execute(f"SELECT {activity.is_mig_sql('g')} FROM g ORDER BY i").fetchall()]
    assert frame.select(activity.is_mig_expr())["mig_instance_id"].to_list() == by_sql == [False, True, True, False]


@pytest.fixture
def mig_warehouse():
    """One A100 cut into MIG instances (gpu 1: instance 0), one whole GPU (gpu 2); both report only
    GPU utilisation (dcgm-exporter on MIG reports 0..1 there only by accident: here 0.75)."""
    con = duckdb.connect()
    apply_migrations(con)
    con.execute("""INSERT INTO gpus (gpu_id, cluster, gpu_uuid, mig_instance_id, host, gpu_index, model,
                   mig_profile, gpu_fraction, pricing_tier) VALUES
                   (1, 'c', 'GPU-a', 0, 'n1', 0, 'A100', '3g.40gb', 3/7, 'reserved'),
                   (2, 'c', 'GPU-b', -1, 'n1', 1, 'A100', NULL, 1.0, 'reserved')""")
    for gpu in (1, 2):
        con.execute("INSERT INTO gpu_hourly (gpu_id, hour, s_n, s_sm_active, s_gr_engine_active, s_gpu_util, "
                    "s_n_sm_active, s_n_gr_engine_active, s_n_gpu_util) VALUES (?, ?, 120, 0, 0, 90, 0, 0, 120)",
                    [gpu, T0])
    return con


def test_dashboard_device_hours_drop_gpu_util_on_mig(mig_warehouse):
    from gpuledger.dashboards.queries import sql

    rows = mig_warehouse.execute(sql("gpu_hours"), {"start": T0, "end": T0 + timedelta(hours=1),
                                                    "now": T0 + timedelta(hours=1), "clusters": [],
                                                    "mig_only": False}).fetchall()
    by_gpu = {r[0]: r[8] for r in rows}  # gpu_id -> activity_ratio
    assert by_gpu == {1: None, 2: 0.75}  # 90 / 120 on the whole GPU; no reading on the MIG instance


def test_whatif_trace_drops_gpu_util_on_mig_for_label_matched_samples(mig_warehouse):
    # a Slurm job without device allocations, found by its hpc_job label on the MIG instance's samples
    from gpuledger.whatif.trace import _MATCH_SLURM, _activity_labels

    con = mig_warehouse
    con.execute("INSERT INTO jobs (cluster, job_id, project, gpus, source, updated_at, start_time, end_time) "
                "VALUES ('c', '42', 'p', 0.43, 'slurm', ?, ?, ?)", [T0, T0, T0 + timedelta(hours=1)])
    con.execute("INSERT INTO gpu_samples (gpu_id, ts, gpu_util_ratio, hpc_job, source) VALUES "
                "(1, ?, 0.75, '42', 'scrape'), (1, ?, 0.75, '42', 'scrape')", [T0, T0 + timedelta(minutes=1)])
    rows = con.execute(_activity_labels(_MATCH_SLURM), {"start": T0, "end": T0 + timedelta(hours=1)}).fetchall()
    assert rows == [("c", "42", 0, None)]
