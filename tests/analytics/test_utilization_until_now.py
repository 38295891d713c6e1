"""Utilization counts installed capacity only up to the data's now: an hour that has not come is
not idle capacity, and the running hour's capacity is its part so far."""

from __future__ import annotations

import pytest

from gpuledger import warehouse
from gpuledger.analytics import queries
from tests.analytics.test_load_utilization import T, small_warehouse  # noqa: F401  (the fixture)


def test_hours_after_the_datas_now_hold_no_capacity(small_warehouse):  # noqa: F811
    with warehouse.open_writer(small_warehouse) as con:  # a sample at 11:29: the data's now
        con.execute("INSERT INTO gpu_samples (gpu_id, ts, gr_engine_active_ratio, source) VALUES (3, ?, 1.0, 'test')",
                    [T(11, 29)])
    with warehouse.open_reader(small_warehouse) as con:
        assert queries.data_now(con) == T(11, 29)
        rows = queries.utilization_report(con, start=T(10), end=T(13), by="fleet").rows(named=True)
    # By hand: two physical GPUs (GPU-A, and GPU-M with its MIG instances). 10:00: 2 GPU-hours of
    # capacity; train (GPU-A, 10-11) and serve (3g of GPU-M, 3/7, running) allocated 1 + 3/7.
    # 11:00: only to 11:29 — capacity 2 x 29/60 = 0.966667, serve's 3/7 x 29/60 = 0.207143
    # allocated, 3/14 = 21.43 % (counted to 12:00 it read 10.36 %). 12:00 has not come: no row.
    assert [r["hour"] for r in rows] == [T(10), T(11)]
    assert rows[0]["gpu_hours_capacity"] == pytest.approx(2.0)
    assert rows[0]["gpu_hours_allocated"] == pytest.approx(1 + 3 / 7)
    assert rows[1]["gpu_hours_capacity"] == pytest.approx(2 * 29 / 60)
    assert rows[1]["gpu_hours_allocated"] == pytest.approx(3 / 7 * 29 / 60)
    assert rows[1]["allocation_pct"] == pytest.approx(100 * 3 / 14)
