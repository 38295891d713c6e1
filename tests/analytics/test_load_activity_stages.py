"""The named stages of load_device_activity (issue 22), each on hand-made rows, values by hand.
NOW 10:00, default policy (grace 30 min, sustained 60 min), lookback 6 h: [04:00, 10:00)."""

from __future__ import annotations

from datetime import datetime, timedelta

import duckdb
import polars as pl

from gpuledger.analytics import load
from gpuledger.analytics.squatting import ACTIVITY_COLUMNS
from gpuledger.config import SquattingPolicy
from tests.helpers.analytics_frames import allocations, at, every, gpus, jobs, samples

NOW = at(10)
M = timedelta(minutes=1)
P = SquattingPolicy()
LOOKBACK = timedelta(hours=6)


def ago(minutes: float) -> datetime:
    return NOW - minutes * M


def _held(job_rows, alloc_rows, gpu_rows):
    return load.held_for_evidence(jobs(job_rows), allocations(alloc_rows), gpus(gpu_rows), now=NOW, policy=P,
                                  lookback=LOOKBACK)


def test_held_for_evidence_keeps_devices_that_can_have_samples():
    held = _held(
        [{"job_id": "A", "project": "p", "start": ago(240)},
         {"job_id": "B", "project": "p", "start": ago(40)},
         {"job_id": "Z", "project": "p", "start": ago(240), "end": ago(5)}],  # ended: not held
        [("A", 1, ago(240), None), ("A", None, ago(240), None),             # a device-less row: dropped
         ("B", 2, ago(40), None), ("Z", 3, ago(240), ago(5))],
        [{"gpu_id": 1}, {"gpu_id": 2, "uuid": "M", "mig": 0, "fraction": 1 / 7}, {"gpu_id": 3}],
    ).sort("job_id")
    assert held.columns == ["k", "cluster", "job_id", "gpu_id", "judged_from", "is_mig"]
    assert held.schema["gpu_id"] == pl.Int32 and held.schema["judged_from"] == pl.Datetime("us")
    assert sorted(held["k"].to_list()) == [0, 1]  # row numbers, what the SQL's rows point back to
    # A: max(start + 30 min = ago(210), alloc start ago(240), now − 6 h = ago(360)) = ago(210);
    # B: started 40 min ago: its grace ends ago(10)
    assert held.select("job_id", "gpu_id", "judged_from", "is_mig").rows() == [
        ("A", 1, ago(210), False), ("B", 2, ago(10), True)]


def test_as_activity_takes_the_keys_by_row_number_and_names_the_signal():
    held = pl.DataFrame({"k": [0, 1, 2], "cluster": ["c1"] * 3, "job_id": ["A", "B", "C"], "gpu_id": [1, 2, 3],
                         "judged_from": [ago(60)] * 3, "is_mig": [False] * 3},
                        schema_overrides={"k": pl.UInt32, "gpu_id": pl.Int32})
    # rows for k 2 and 0 only (B has no judged sample), out of order, as the SQL may return them
    evidence = pl.DataFrame([(2, 3, None, ago(50), 55.0, 7), (0, 1, ago(5), ago(4), 60.0, None)],
                            schema=load._EVIDENCE_SCHEMA, orient="row")
    out = load.as_activity(held, evidence).collect()
    assert out.schema == pl.Schema(ACTIVITY_COLUMNS)
    assert out.rows() == [("c1", "C", 3, "gpu_util", None, ago(50), 55.0, 7),
                          ("c1", "A", 1, "sm_active", ago(5), ago(4), 60.0, None)]


def _con(rows):
    con = duckdb.connect()
    con.register("gpu_samples", samples(rows).collect())
    return con


def test_evidence_sustained_first_equals_one_pass_over_the_lookback(monkeypatch):
    """A: sm 0.7 until 30 min ago, then 0 (memory all along): the window settles it.
    B: sm 0 since it started 240 min ago: idle through the window, read again from its
    judged_from (ago(210)). C: sm 0.7 until 120 min ago, then only gr 0: the window's signal (gr)
    is outranked by sm before it, so C is read over the whole lookback, on sm."""
    job_rows = [{"job_id": j, "project": "p", "start": ago(240)} for j in "ABC"]
    held = _held(job_rows, [(j, g, ago(240), None) for j, g in zip("ABC", (1, 2, 3))],
                 [{"gpu_id": g} for g in (1, 2, 3)])
    rows = every(1, ago(240), ago(30), sm=0.7, fb=10) + every(1, ago(30), NOW, sm=0.0, fb=40)
    rows += every(2, ago(240), NOW, sm=0.0, fb=40)
    rows += every(3, ago(240), ago(120), sm=0.7) + every(3, ago(120), NOW, gr=0.0)
    con = _con(rows)
    lo, cov_from = NOW - LOOKBACK, NOW - timedelta(minutes=60)
    params = {"now": NOW, "thr": P.idle_threshold_ratio, "cov_from": cov_from,
              "now_us": (NOW - datetime(1970, 1, 1)) // timedelta(microseconds=1)}
    calls, evidence = [], load._evidence

    def counted(con, held, *, since, params):
        calls.append((since, sorted(held["job_id"])))
        return evidence(con, held, since=since, params=params)

    monkeypatch.setattr(load, "_evidence", counted)
    got = load.as_activity(held, load.evidence_sustained_first(con, held, lo=lo, cov_from=cov_from,
                                                               params=params)).collect().sort("job_id")
    # the window for all; B again from its judged_from; C over the whole lookback
    assert calls == [(cov_from, ["A", "B", "C"]), (ago(210), ["B"]), (lo, ["C"])]
    monkeypatch.setattr(load, "_evidence", evidence)
    ref = load.as_activity(held, load._evidence(con, held, since=lo, params=params)).collect().sort("job_id")
    assert got.equals(ref)
    by_job = {r["job_id"]: r for r in got.iter_rows(named=True)}
    # A: last active sample 31 min ago, idle from the next; a sample a minute covers the 60 minutes
    assert (by_job["A"]["last_active"], by_job["A"]["idle_since"]) == (ago(31), ago(30))
    assert (by_job["A"]["covered_minutes"], by_job["A"]["fb_used_bytes"]) == (60.0, 40)
    # B: never active: idle since its first judged sample, its grace end
    assert (by_job["B"]["last_active"], by_job["B"]["idle_since"]) == (None, ago(210))
    # C: judged on sm, whose last reading (ago(121)) is active: not idle; no sm reading in the window
    assert by_job["C"]["activity_signal"] == "sm_active"
    assert (by_job["C"]["last_active"], by_job["C"]["idle_since"]) == (ago(121), None)
