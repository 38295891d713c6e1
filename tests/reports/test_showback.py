"""Showback of activity (issue 21 §8): an option beside the statement, reconciling per pool.

Rule (reports/showback.py): marked hours (time-sliced, or without a signal for the basis) keep
their billed share, billed × marked / allocated; the rest of the pool (charges of the measured
hours + the pool's idle) is shared by the measured lines in proportion to their measure; a pool
with nothing measured keeps its lines and its idle as billed.

October (tests/helpers/statement_fixtures.py), basis ``active``. Pool H100 / reserved bills alpha
480.00 + gamma 48.00 + idle 2,448.00 = 2,976.00. alpha has no samples: 240 GPU-hours without an
activity signal, kept at 480.00 (never discounted, never loaded with idle); gamma is the one
measured line (12 active GPU-hours), so it takes the rest: 2,976 − 480 = 2,496.00 (idle
redistributed 2,448.00, the idle line −2,448.00). Pool A100 / reserved: beta 240.00 (no samples)
and idle 504.00: nothing measured, both as billed.

The energy fixture (``_energy_day`` below), Oct 1 00:00–20:00, rates H100 2.00 and A100 1.00,
``--now`` 20:00 so capacity is billed for 20 h:
  GPU-h1: alpha-1 00–10 (0.5 kWh/h, sm_active 0.25), beta-1 10–20 (no samples)
  GPU-h2: gamma-1 00–10 (1.0 kWh/h, sm_active 0.75), idle 10–20
  GPU-a:  alpha-2 and gamma-2 time-sliced 00–10 at 0.5 each (samples: 2.0 kWh/h, sm 0.9: the
          device's, nobody's in particular), beta-3 10–15 alone (2.0 kWh/h, sm 0.5), idle 15–20
H100 pool: alpha 10 h 20.00, gamma 10 h 20.00, beta 10 h 20.00, idle 10 h 20.00 = 80.00
  (capacity 2 GPUs × 20 h × 2.00). beta is marked (no signal) and keeps 20.00; shared 60.00.
  energy: alpha and gamma have the same samples, so their kWh are in ratio 0.5 : 1.0 (the first
  hour counts 119 of 120 steps for both; the ratio holds): alpha 60 × 1/3 = 20.00, gamma 40.00.
  active: alpha 10 × 0.25 = 2.5, gamma 7.5: alpha 60 × 2.5/10 = 15.00, gamma 45.00.
A100 pool: alpha-2 5 h 5.00 and gamma-2 5 h 5.00 (time-sliced, kept), beta-3 5 h 5.00, idle 5 h
  5.00 = 20.00 (capacity 20 h × 1.00); shared 20 − 10 = 10.00, all beta's (the one measured line):
  the same under both bases.
"""

from __future__ import annotations

import json
from datetime import datetime
from decimal import Decimal

import numpy as np
import polars as pl
import pytest
from typer.testing import CliRunner

from gpuledger import warehouse
from gpuledger.cli import app
from tests.helpers.ledger_fixtures import devices, job, load
from tests.helpers.statement_fixtures import CONFIG, october

D = Decimal
STRINGS = {c: pl.String for c in ("billed", "kept_allocated", "showback", "idle_redistributed")}


def _statement(warehouse_file, out, *extra):
    return CliRunner().invoke(app, ["report", "statement", "--period", "2026-10", "--out", str(out), "--no-pdf",
                                    *extra, "--warehouse", str(warehouse_file)])


def _rows(path) -> dict:
    sb = pl.read_csv(path, schema_overrides=STRINGS)
    return {(r["gpu_model"], r["project"]): (D(r["billed"]), D(r["showback"]), D(r["idle_redistributed"]),
                                            r["marked"] or "") for r in sb.iter_rows(named=True)}


@pytest.mark.slow
def test_showback_reweights_by_activity_and_reconciles(warehouse_file, tmp_path):
    october(warehouse_file)
    out = tmp_path / "oct"
    result = _statement(warehouse_file, out, "--showback", "active")
    assert result.exit_code == 0, result.output
    got = _rows(out / "showback-active-2026-10-acme.csv")
    assert got == {("H100", "alpha"): (D("480.00"), D("480.00"), D("0.00"), "no activity signal"),
                   ("H100", "gamma"): (D("48.00"), D("2496.00"), D("2448.00"), ""),
                   ("H100", "(idle)"): (D("2448.00"), D("0.00"), D("-2448.00"), ""),
                   ("A100", "beta"): (D("240.00"), D("240.00"), D("0.00"), "no activity signal"),
                   ("A100", "(idle)"): (D("504.00"), D("504.00"), D("0.00"), "")}
    assert sum(v[1] for v in got.values()) == D("3720.00")  # the ledger's total, unchanged
    assert sum(v[2] for v in got.values()) == 0  # the idle redistributed is stated, and nets out
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["totals"] == {"USD": "3720.00"}  # the statement stays the ledger of record
    assert {"showback-active-2026-10-acme.csv", "showback-active-2026-10-acme.html"} <= {f["path"] for f in manifest["files"]}
    html = (out / "showback-active-2026-10-acme.html").read_text()  # as read: headers with units, not the ledger
    assert "Not the ledger of record" in html and "<th>Showback (USD)</th>" in html
    assert "<th>Measure (active GPU-hours)</th>" in html and "2,496.00" in html
    assert any("idle redistributed 2,448.00" in s and "240.000 GPU-hours without an activity signal" in s
               for s in manifest["showback"]["per_pool"])
    plain = _statement(warehouse_file, tmp_path / "p")
    assert plain.exit_code == 0 and not list((tmp_path / "p").glob("showback-*"))  # never the default


def _samples(con, gpu: int, start: str, hours: int, *, kwh_per_hour: float, sm: float, from_j: float = 0.0):
    n = hours * 120
    step_j = kwh_per_hour * 3_600_000 / 120
    warehouse.write_samples(con, pl.DataFrame({
        "gpu_id": np.full(n, gpu, dtype=np.int32),
        "ts": np.datetime64(start, "us") + np.arange(n) * np.timedelta64(30, "s"),
        "sm_active_ratio": np.full(n, sm), "energy_total_j": from_j + np.arange(n) * step_j}), "test")


def _energy_day(path) -> None:
    h = lambda hour: datetime(2026, 10, 1, hour)  # noqa: E731
    with warehouse.open_writer(path) as con:
        load(con, CONFIG, at=datetime(2026, 9, 30))
        ids = devices(con, [("GPU-h1", "node-h1", "H100"), ("GPU-h2", "node-h2", "H100"),
                            ("GPU-a", "node-a", "A100")])
        job(con, "alpha-1", "alpha", ids["GPU-h1"], h(0), h(10))
        job(con, "beta-1", "beta", ids["GPU-h1"], h(10), h(20))
        job(con, "gamma-1", "gamma", ids["GPU-h2"], h(0), h(10))
        job(con, "beta-3", "beta", ids["GPU-a"], h(10), h(15), model="A100")
        for name, project in (("alpha-2", "alpha"), ("gamma-2", "gamma")):  # time-sliced: half of GPU-a each
            job(con, name, project, None, h(0), h(10), model="A100", gpus=0.5)
            warehouse.upsert(con, "job_allocations", pl.DataFrame(
                {"cluster": ["c1"], "job_id": [name], "gpu_id": [ids["GPU-a"]], "start_time": [h(0)],
                 "end_time": [h(10)], "gpu_fraction": [0.5]},
                schema_overrides={"gpu_id": pl.Int32, "start_time": pl.Datetime("us"), "end_time": pl.Datetime("us")}))
        _samples(con, ids["GPU-h1"], "2026-10-01T00:00:00", 10, kwh_per_hour=0.5, sm=0.25)
        _samples(con, ids["GPU-h2"], "2026-10-01T00:00:00", 10, kwh_per_hour=1.0, sm=0.75)
        _samples(con, ids["GPU-a"], "2026-10-01T00:00:00", 10, kwh_per_hour=2.0, sm=0.9)
        _samples(con, ids["GPU-a"], "2026-10-01T10:00:00", 5, kwh_per_hour=2.0, sm=0.5, from_j=72_000_000.0)


@pytest.mark.slow
def test_showback_energy_basis_marks_time_sliced_and_unmeasured_hours(warehouse_file, tmp_path):
    _energy_day(warehouse_file)
    want_a100 = {("A100", "alpha"): (D("5.00"), D("5.00"), D("0.00"), "time-sliced"),
                 ("A100", "gamma"): (D("5.00"), D("5.00"), D("0.00"), "time-sliced"),
                 ("A100", "beta"): (D("5.00"), D("10.00"), D("5.00"), ""),
                 ("A100", "(idle)"): (D("5.00"), D("0.00"), D("-5.00"), "")}
    for basis, alpha, gamma, no_signal in (("energy", "20.00", "40.00", "no energy reading"),
                                           ("active", "15.00", "45.00", "no activity signal")):
        out = tmp_path / basis
        result = _statement(warehouse_file, out, "--now", "2026-10-01T20:00:00", "--showback", basis)
        assert result.exit_code == 0, result.output
        got = _rows(out / f"showback-{basis}-2026-10-acme.csv")
        assert got == {("H100", "alpha"): (D("20.00"), D(alpha), D(alpha) - D("20.00"), ""),
                       ("H100", "gamma"): (D("20.00"), D(gamma), D(gamma) - D("20.00"), ""),
                       ("H100", "beta"): (D("20.00"), D("20.00"), D("0.00"), no_signal),
                       ("H100", "(idle)"): (D("20.00"), D("0.00"), D("-20.00"), ""),
                       **want_a100}, basis
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest["totals"] == {"USD": "100.00"}  # 80.00 + 20.00: capacity of the 20 h billed
        sb = pl.read_csv(out / f"showback-{basis}-2026-10-acme.csv")
        assert set(sb["measure_unit"]) == {"kWh" if basis == "energy" else "active GPU-hours"}
        sliced = sb.filter(pl.col("marked") == "time-sliced")
        assert sliced["gpu_hours_time_sliced"].to_list() == [5.0, 5.0] and sliced["measure"].to_list() == [0.0, 0.0]
