"""The named stages of showback_lines (issue 22), each on its own, numbers by hand. The rule
(reports/showback.py): marked hours keep billed × marked / allocated; the rest of the pool is
shared by the measured lines in proportion to their measure, in cents by largest remainder."""

from __future__ import annotations

from decimal import Decimal
from types import SimpleNamespace

import polars as pl

from gpuledger.reports import showback as sb

D = Decimal
POOL = ("USD", "H100", "reserved")


def _charge(**kw) -> dict:
    row = {"business_unit": "bu", "project": "p", "gpu_hours": 10.0, "gpu_hours_time_sliced": 0.0,
           "gpu_hours_unknown": 0.0, "gpu_hours_active": 0.0, "gpu_hours_no_energy": 0.0, "gpu_hours_mig": 0.0,
           "energy_kwh": 0.0, "billed": D("20.00")}
    return {**row, **kw}


def test_measured_line_marks_time_sliced_then_unsignalled_hours():
    # active: 10 h, 2 time-sliced, 5 unknown (the 2 sliced among them): 3 without a signal;
    # marked 5 of 10 keep 20.00 × 5/10 = 10.00; 5 h measured, 4 active GPU-hours.
    r = sb.measured_line(_charge(gpu_hours_time_sliced=2.0, gpu_hours_unknown=5.0, gpu_hours_active=4.0), "active")
    assert (r["gpu_hours_time_sliced"], r["gpu_hours_no_signal"], r["gpu_hours_measured"]) == (2.0, 3.0, 5.0)
    assert (r["kept_allocated"], r["measure"], r["marked"]) == (D("10.00"), 4.0, "time-sliced; no activity signal")
    # energy: 4 h without a reading, 1 of them a MIG slice; marked 2 + 4 = 6: keeps 12.00; 7.5 kWh
    r = sb.measured_line(_charge(gpu_hours_time_sliced=2.0, gpu_hours_no_energy=4.0, gpu_hours_mig=1.0,
                                 energy_kwh=7.5), "energy")
    assert (r["gpu_hours_no_signal"], r["gpu_hours_measured"], r["kept_allocated"]) == (4.0, 4.0, D("12.00"))
    assert r["marked"] == "time-sliced; no energy reading; MIG slice (energy is its GPU's)"
    # a correction's amount without hours: nothing measures it, it keeps all of it
    assert sb.measured_line(_charge(gpu_hours=0.0, billed=D("1.00")), "active")["kept_allocated"] == D("1.00")


def _line(billed, kept, measure, measured_h, project="p"):
    return {"business_unit": "bu", "project": project, "gpu_hours": 10.0, "gpu_hours_time_sliced": 0.0,
            "gpu_hours_no_signal": 0.0, "gpu_hours_measured": measured_h, "measure": measure, "billed": D(billed),
            "kept_allocated": D(kept), "marked": ""}


def test_redistributed_shares_the_rest_by_measure():
    """A billed 20 (keeps 10, measure 4), B billed 10 (keeps 0, measure 1), idle 30: total 60,
    shared 60 − 10 = 50: A 10 + 50 × 4/5 = 50, B 50 × 1/5 = 10, the idle 0."""
    total, exact, idle = sb.redistributed([_line("20", "10", 4, 5), _line("10", "0", 1, 5)], D("30"))
    assert (total, exact, idle) == (D(60), [D(50), D(10)], D(0))
    # nothing measured (no measured hours): each keeps its charge, the idle stays idle
    total, exact, idle = sb.redistributed([_line("20", "20", 4, 0), _line("10", "10", 0, 0)], D("30"))
    assert (total, exact, idle) == (D(60), [D(20), D(10)], D(30))


def test_pool_showback_rounds_to_cents_that_add_up():
    """Three measured lines of 0.50, equal measure, idle 0.50: 2.00 in thirds, 66.67 cents each:
    floors 66 + 66 + 66 = 198, the 2 cents left to the first two: 0.67, 0.67, 0.66; the idle line
    shows −0.50 redistributed."""
    lines = [_line("0.50", "0", 1, 10, project=p) for p in ("a", "b", "c")]
    out = sb.pool_showback(POOL, lines, {"billed": D("0.50"), "gpu_hours": 5.0}, "active")
    assert [(r["project"], r["showback"], r["idle_redistributed"]) for r in out] == [
        ("a", D("0.67"), D("0.17")), ("b", D("0.67"), D("0.17")), ("c", D("0.66"), D("0.16")),
        ("(idle)", D("0.00"), D("-0.50"))]
    assert sum(r["showback"] for r in out) == D("2.00") == sum(r["billed"] for r in out)
    assert {(r["currency"], r["gpu_model"], r["tier"], r["measure_unit"]) for r in out} == {
        (*POOL, "active GPU-hours")}


def test_kept_allocated_is_shown_in_cents_half_up():
    # a line billed 0.25 with 1 of its 2 hours marked keeps 0.25 × 1/2 = 0.125 exactly: half-up
    # shows 0.13 (banker's rounding would show 0.12); the showback itself is the pool's 0.25
    line = sb.measured_line(_charge(gpu_hours=2.0, gpu_hours_time_sliced=1.0, gpu_hours_active=1.0,
                                    billed=D("0.25")), "active")
    assert line["kept_allocated"] == D("0.125")
    out = sb.pool_showback(POOL, [line], None, "active")
    assert [(r["kept_allocated"], r["showback"]) for r in out] == [(D("0.13"), D("0.25"))]


def test_pool_money_bills_charges_and_idle_with_their_corrections():
    """p's charge 10.00 (4 h) and a debit correcting it 1.50 (no hours of a charge line): billed
    11.50 over 4 h; idle 5.00 less a 0.25 credit: 4.75; a memo line (over-allocated) is left out."""
    lines = pl.DataFrame({
        "business_unit": ["bu", "bu", None, None, None], "project": ["p", "p", "(idle)", "(idle)", "(over)"],
        "currency": ["USD"] * 5, "gpu_model": ["H100"] * 5, "tier": ["reserved"] * 5,
        "line_kind": ["charge", "debit", "idle", "credit", "over-allocated"],
        "correction_of": [None, "charge", None, "idle", None],
        "gpu_hours": [4.0, 0.5, 2.0, 0.0, 1.0], "amount": [D("10.00"), D("1.50"), D("5.00"), D("-0.25"), D("3.00")]})
    usage = pl.DataFrame({"project": ["p"], "model": ["H100"], "tier": ["reserved"], "gpu_hours_active": [3.0],
                          "gpu_hours_unknown": [1.0], "gpu_hours_time_sliced": [0.0], "gpu_hours_no_energy": [0.0],
                          "gpu_hours_mig": [0.0], "energy_kwh": [2.0]})
    charges, idle = sb.pool_money(SimpleNamespace(lines=lines, usage=usage))
    (c,) = charges.iter_rows(named=True)
    assert (c["project"], c["billed"], c["gpu_hours"], c["gpu_hours_active"]) == ("p", D("11.50"), 4.0, 3.0)
    (i,) = idle.iter_rows(named=True)
    assert (i["billed"], i["gpu_hours"]) == (D("4.75"), 2.0)
