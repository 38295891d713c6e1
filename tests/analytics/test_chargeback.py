"""Chargeback: month boundary, mid-month rate change, idle line vs spread, and the invariant."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuledger.analytics.chargeback import chargeback_lines, chargeback_totals, period_bounds, statement_notes
from tests.helpers.analytics_frames import allocations, gpus, jobs, org, rate_card

OCT = lambda d, h=0: datetime(2026, 10, d, h)  # noqa: E731
NOW = datetime(2026, 11, 29)
RATES = rate_card([("H100", "reserved", datetime(2026, 1, 1), "2.10"),
                   ("H100", "reserved", OCT(16), "2.50")])


def _lines(al, inv, jb, period, rates=RATES, **kw):
    start, end = period_bounds(period) if isinstance(period, str) else period
    return chargeback_lines(al, inv, jb, rates, start=start, end=end, now=NOW, **kw).collect()


def _charge(df, job):
    return df.filter(pl.col("job_id") == job)


def test_period_bounds():
    assert period_bounds("2026-10") == (OCT(1), datetime(2026, 11, 1))
    assert period_bounds("2026-02") == (datetime(2026, 2, 1), datetime(2026, 3, 1))
    assert period_bounds("2026-10-05") == (OCT(5), OCT(6))
    assert period_bounds("2026-W41") == (OCT(5), OCT(12))  # ISO week 41 of 2026 starts Monday Oct 5
    assert period_bounds("2026-10-01..2026-10-03T12:00") == (OCT(1), OCT(3, 12))
    with pytest.raises(ValueError, match="YYYY-MM"):
        period_bounds("October")


def test_job_crossing_a_month_boundary_is_split():
    inv = gpus([{"gpu_id": 1}])
    al = allocations([("J", 1, datetime(2026, 9, 30, 20), OCT(1, 4))])
    jb = jobs([{"job_id": "J", "project": "p"}])
    sep, octo = _lines(al, inv, jb, "2026-09"), _lines(al, inv, jb, "2026-10")
    # 4 h in each month at 2.10: 8.40 each.
    assert _charge(sep, "J")["gpu_hours_allocated"].to_list() == [4.0]
    assert _charge(sep, "J")["amount"].to_list() == [Decimal("8.40")]
    assert _charge(octo, "J")["amount"].to_list() == [Decimal("8.40")]
    # October: 1 GPU × 744 h; Oct 1-16 at 2.10 (360 h), Oct 16-31 at 2.50 (384 h) = 756 + 960 = 1716.00.
    # Idle = 1716.00 - 8.40 = 1707.60 over 740 h.
    idle = octo.filter(pl.col("line_kind") == "idle").to_dicts()[0]
    assert idle["amount"] == Decimal("1707.60") and idle["gpu_hours_allocated"] == pytest.approx(740)
    assert octo["amount"].sum() == Decimal("1716.00")


def test_rate_change_mid_month_applies_hour_by_hour():
    inv = gpus([{"gpu_id": 1}, {"gpu_id": 2, "uuid": "M", "mig": 3, "fraction": 3 / 7, "profile": "3g.40gb"}])
    al = allocations([("J", 1, OCT(15, 22), OCT(16, 2)), ("K", 2, OCT(15, 22), OCT(16, 2), 0.5)])
    jb = jobs([{"job_id": "J", "project": "p"}, {"job_id": "K", "project": "q"}])
    df = _lines(al, inv, jb, "2026-10")
    # J: 2 h at 2.10 + 2 h at 2.50 = 9.20.
    assert _charge(df, "J")["amount"].to_list() == [Decimal("9.20")]
    # K: half of a 3g slice = 3/14 GPU for the same 4 h: 9.20 × 3/14 = 1.971428... -> 1.97
    assert _charge(df, "K")["gpu_hours_allocated"].to_list() == pytest.approx([4 * 3 / 14])
    assert _charge(df, "K")["amount"].to_list() == [Decimal("1.97")]
    # Two physical GPUs: 2 × 1716.00 = 3432.00 in all.
    assert df["amount"].sum() == Decimal("3432.00")
    assert chargeback_totals(inv, RATES, start=OCT(1), end=datetime(2026, 11, 1)).collect()[
        "capacity_amount"].to_list() == [Decimal("3432.00")]


def test_capacity_total_is_the_sum_of_its_pools_rounded_as_the_lines_are():
    # Two idle GPUs for one hour, one per pool (H100 reserved, H100 spot), each priced 1.005 / GPU-h.
    # By hand: each pool's exact cost 1.005 -> its idle line 1.01 (half-up, pool first); the lines
    # add up to 1.01 + 1.01 = 2.02. The currency's exact total 2.010 rounded once would be 2.01: a
    # cent the statement would call "DOES NOT reconcile" (the demo's November did, off by 0.01).
    inv = gpus([{"gpu_id": 1, "tier": "reserved"}, {"gpu_id": 2, "tier": "spot"}])
    rates = rate_card([("H100", "reserved", datetime(2026, 1, 1), "1.005"),
                       ("H100", "spot", datetime(2026, 1, 1), "1.005")])
    start, end = OCT(1, 0), OCT(1, 1)
    lines = chargeback_lines(allocations([]), inv, jobs([]), rates, start=start, end=end, now=NOW).collect()
    assert sorted(lines.filter(pl.col("billed"))["amount"].to_list()) == [Decimal("1.01"), Decimal("1.01")]
    totals = chargeback_totals(inv, rates, start=start, end=end).collect()
    assert totals["capacity_amount"].to_list() == [Decimal("2.02")]
    assert totals["gpu_hours_capacity"].to_list() == [2.0]
    pools = chargeback_totals(inv, rates, start=start, end=end, by=("model", "tier")).sort("tier").collect()
    assert pools["capacity_amount"].to_list() == [Decimal("1.01"), Decimal("1.01")]


def _ten_hours():
    inv = gpus([{"gpu_id": 1}, {"gpu_id": 2}])
    rates = rate_card([("H100", "reserved", datetime(2026, 1, 1), "3.00")])
    al = allocations([("a", 1, OCT(1, 0), OCT(1, 10)), ("b", 2, OCT(1, 0), OCT(1, 5))])
    jb = jobs([{"job_id": "a", "project": "pa"}, {"job_id": "b", "project": "pb"}])
    return al, inv, jb, rates


def test_idle_on_its_own_line_or_spread():
    al, inv, jb, rates = _ten_hours()
    period = (OCT(1, 0), OCT(1, 10))
    # 2 GPUs × 10 h × 3.00 = 60.00: a 10 h = 30.00, b 5 h = 15.00, idle 5 h = 15.00.
    line = {(r["line_kind"], r["job_id"]): r["amount"] for r in _lines(al, inv, jb, period, rates).to_dicts()}
    assert line == {("charge", "a"): Decimal("30.00"), ("charge", "b"): Decimal("15.00"),
                    ("idle", None): Decimal("15.00")}
    # Spread in proportion to charges: a gets 15 × 30/45 = 10, b 15 × 15/45 = 5.
    spread = _lines(al, inv, jb, period, rates, idle_cost="spread")
    got = {r["job_id"]: (r["amount"], r["idle_amount_included"]) for r in spread.to_dicts()}
    assert got == {"a": (Decimal("40.00"), Decimal("10.00")), "b": (Decimal("20.00"), Decimal("5.00"))}


def test_project_and_node_levels_add_up():
    al, inv, jb, rates = _ten_hours()
    tree = org([("acme", None, 1), ("pa", "acme", 1), ("pb", "acme", 1)])
    period = (OCT(1, 0), OCT(1, 10))
    proj = {r["project"]: r["amount"] for r in _lines(al, inv, jb, period, rates, level="project").to_dicts()}
    assert proj == {"pa": Decimal("30.00"), "pb": Decimal("15.00"), "(idle)": Decimal("15.00")}
    node = {(r["line_kind"], r["node"]): r["amount"]
            for r in _lines(al, inv, jb, period, rates, level="node", org_nodes=tree).to_dicts()}
    assert node[("charge", "acme")] == Decimal("45.00")
    assert node[("idle", "(idle)")] == Decimal("15.00")


def test_model_missing_from_the_rate_card_is_unpriced_not_a_crash():
    # Issue 8 item 3 (this raised "rate card: no price in force for B300/reserved" before, and
    # allocations on unknown devices or jobs without a model were silently left out).
    # Oct 1, 24 h. GPU 1 is a B300 (no rate), GPU 2 an H100 at 2.10. J holds GPU 1 for 10 h,
    # K GPU 2 for 10 h, L device 9 (not in the inventory) for 2 h, M is a job record of 1 GPU
    # for 3 h that names no model.
    inv = gpus([{"gpu_id": 1, "model": "B300"}, {"gpu_id": 2}])
    al = allocations([("J", 1, OCT(1, 0), OCT(1, 10)), ("K", 2, OCT(1, 0), OCT(1, 10)),
                      ("L", 9, OCT(1, 0), OCT(1, 2))])
    jb = jobs([{"job_id": "J", "project": "p"}, {"job_id": "K", "project": "p"}, {"job_id": "L", "project": "q"},
               {"job_id": "M", "project": "q", "model": None, "start": OCT(1, 5), "end": OCT(1, 8)}])
    df = _lines(al, inv, jb, "2026-10-01")
    got = {(r["line_kind"], r["job_id"]): (r["gpu_hours_allocated"], r["amount"], r["note"]) for r in df.to_dicts()}
    # Billed: K 10 h × 2.10 = 21.00; H100 idle 14 h × 2.10 = 29.40; total = the H100's 24 × 2.10.
    assert got[("charge", "K")] == (pytest.approx(10), Decimal("21.00"), None)
    assert got[("idle", None)][:2] == (pytest.approx(14), Decimal("29.40"))
    assert df.filter(pl.col("billed"))["amount"].sum() == Decimal("50.40")
    # Unpriced, with hours and reason, no amount: J 10 h and the B300's 14 idle hours, L, M.
    assert got[("unpriced", "J")] == (pytest.approx(10), None, "no price for B300/reserved in the rate card")
    assert got[("unpriced", "L")] == (pytest.approx(2), None, "device 9 not in the inventory")
    assert got[("unpriced", "M")] == (pytest.approx(3), None, "job record names no GPU model")
    idle_b300 = df.filter((pl.col("line_kind") == "unpriced") & pl.col("job_id").is_null()).to_dicts()
    assert [(r["gpu_model"], r["gpu_hours_allocated"], r["note"]) for r in idle_b300] == [
        ("B300", pytest.approx(14), "no price for B300/reserved in the rate card (idle capacity)")]
    assert not df.filter(pl.col("line_kind") == "unpriced")["billed"].any()
    # The warning names the models and devices: 10 + 14 + 2 + 3 = 29 GPU-hours.
    notes, warnings = statement_notes(df)
    assert len(warnings) == 1 and warnings[0].startswith("29.000 GPU-hours unpriced")
    assert "B300/reserved" in warnings[0] and "device 9 not in the inventory" in warnings[0]
    assert "no GPU model" in warnings[0]
    # Project and node levels keep them too (per project, and rolled up the tree).
    proj = _lines(al, inv, jb, "2026-10-01", level="project").filter(pl.col("line_kind") == "unpriced")
    assert dict(proj.group_by("project").agg(pl.col("gpu_hours_allocated").sum()).iter_rows()) == {
        "p": pytest.approx(10), "q": pytest.approx(5), "(idle)": pytest.approx(14)}
    tree = org([("acme", None, 1), ("p", "acme", 1), ("q", "acme", 1)])
    node = _lines(al, inv, jb, "2026-10-01", level="node", org_nodes=tree).filter(pl.col("line_kind") == "unpriced")
    assert node.filter(pl.col("node") == "acme")["gpu_hours_allocated"].sum() == pytest.approx(15)


def test_two_projects_of_twenty_small_jobs_round_top_down():
    # Issue 8 item 1: 20 jobs of 36 s and 20 of 39 s at 2.40 per GPU-hour cost 0.024 and 0.026
    # each: projects pa = 0.48 and pb = 0.52 exactly. One largest-remainder pool over the 40 job
    # lines (the old rule) gave every pb job the spare cent: 20 × 0.02 = 0.40 and 20 × 0.03 = 0.60.
    # Top-down: total 1.00; pa 0.48, pb 0.52; pa's 48 cents over its 20 jobs (2.4 each): 20 × 2
    # floors + 8 jobs one more; pb's 52 (2.6 each): 40 + 12.
    rates = rate_card([("H100", "reserved", datetime(2026, 1, 1), "2.40")])
    t = OCT(1)
    rows = [{"job_id": f"a{i:02}", "project": "pa", "start": t, "end": t + timedelta(seconds=36)} for i in range(20)]
    rows += [{"job_id": f"b{i:02}", "project": "pb", "start": t, "end": t + timedelta(seconds=39)} for i in range(20)]
    jb, none = jobs(rows), allocations([])
    inv = gpus([{"gpu_id": 1, "cluster": "elsewhere"}])  # c1 itself has no inventory: no idle
    tree = org([("acme", None, 1), ("pa", "acme", 1), ("pb", "acme", 1)])
    kw = {"org_nodes": tree, "now": NOW}
    period = (t, t + timedelta(hours=1))
    job = chargeback_lines(none, inv, jb, rates, start=period[0], end=period[1], **kw).collect()
    charge = job.filter(pl.col("line_kind") == "charge")
    per_project = dict(charge.group_by("project").agg(pl.col("amount").sum()).iter_rows())
    assert per_project == {"pa": Decimal("0.48"), "pb": Decimal("0.52")}
    a = charge.filter(pl.col("project") == "pa")["amount"].value_counts().sort("amount").rows()
    assert a == [(Decimal("0.02"), 12), (Decimal("0.03"), 8)]
    proj = chargeback_lines(none, inv, jb, rates, start=period[0], end=period[1], level="project", **kw).collect()
    assert dict(proj.filter(pl.col("line_kind") == "charge").select("project", "amount").iter_rows()) == per_project
    node = chargeback_lines(none, inv, jb, rates, start=period[0], end=period[1], level="node", **kw).collect()
    assert dict(node.filter(pl.col("line_kind") == "charge").select("node", "amount").iter_rows()) == {
        "acme": Decimal("1.00"), **per_project}
    # The elsewhere GPU's hour of idle is billed on its own (1 × 2.40); c1 is said to be unknown.
    assert job.filter(pl.col("line_kind") == "idle")["amount"].to_list() == [Decimal("2.40")]
    assert job.filter(pl.col("line_kind") == "capacity-unknown")["cluster"].to_list() == ["c1"]


def test_spread_idle_rounds_half_up():
    # Issue 8 item 2: 1 GPU for 1 h at 0.01: job a holds it 30 min (0.005), idle 0.005. Spread,
    # a carries all of it: 0.01 with 0.005 of idle inside, which rounds half-up to 0.01. Polars'
    # Decimal.round (half to even) made it 0.00 — a 0.01 line "with no idle in it".
    rates = rate_card([("H100", "reserved", datetime(2026, 1, 1), "0.01")])
    inv = gpus([{"gpu_id": 1}])
    al = allocations([("a", 1, OCT(1, 0), OCT(1, 0) + timedelta(minutes=30))])
    jb = jobs([{"job_id": "a", "project": "p"}])
    df = _lines(al, inv, jb, (OCT(1, 0), OCT(1, 1)), rates, idle_cost="spread")
    assert df.select("line_kind", "amount", "idle_amount_included").rows() == [
        ("charge", Decimal("0.01"), Decimal("0.01"))]


def test_spread_idle_is_split_by_largest_remainder():
    # 1 GPU for 1 h at 0.03 = 0.03; three jobs of 10 min (0.005 each), idle 0.015 spread in
    # equal thirds (0.005 each). Per job exact 0.01, idle part 0.005: each line 0.01, and the
    # idle parts (1.5 cents in all -> 2 cents half-up at the root) go 1, 1, 0 by largest
    # remainder (ties by name) — never 0.005 -> 0.00 on every line (0 of 1.5 cents).
    rates = rate_card([("H100", "reserved", datetime(2026, 1, 1), "0.03")])
    inv = gpus([{"gpu_id": 1}])
    m = timedelta(minutes=10)
    al = allocations([(j, 1, OCT(1, 0) + i * m, OCT(1, 0) + (i + 1) * m) for i, j in enumerate("abc")])
    jb = jobs([{"job_id": j, "project": "p"} for j in "abc"])
    df = _lines(al, inv, jb, (OCT(1, 0), OCT(1, 1)), rates, idle_cost="spread")
    assert df["amount"].to_list() == [Decimal("0.01")] * 3
    assert sorted(df["idle_amount_included"].to_list()) == [Decimal("0.00"), Decimal("0.01"), Decimal("0.01")]


def test_capacity_is_what_existed():
    # Issue 8 item 4. October at 1.00 per GPU-hour, nobody allocated. GPU 1 was last seen Oct 10
    # 12:30: with the default 24 h grace it is capacity until Oct 11 12:30, i.e. the hours that
    # start before it: 10 × 24 + 13 = 253 h. GPU 2 is retired by the inventory on Oct 5: 96 h.
    # GPU 3 was first seen Oct 20 05:10, never retired: from the 05:00 hour to Nov 1 = 11 days
    # 19 h = 283 h. In all 632 h = 632.00; before, every GPU cost all 744 h: 3 × 744 = 2232.00.
    rates = rate_card([("H100", "reserved", datetime(2026, 1, 1), "1.00")])
    inv = gpus([{"gpu_id": 1, "last_seen": OCT(10, 12) + timedelta(minutes=30)},
                {"gpu_id": 2, "last_seen": OCT(30), "retired_at": OCT(5)},
                {"gpu_id": 3, "first_seen": OCT(20, 5) + timedelta(minutes=10)}])
    df = _lines(allocations([]), inv, jobs([]), "2026-10", rates)
    assert df["gpu_hours_allocated"].to_list() == [pytest.approx(253 + 96 + 283)]
    assert df["amount"].to_list() == [Decimal("632.00")]
    # A longer grace keeps GPU 1 three more days (the hours before Oct 14 12:30: +72 h).
    longer = chargeback_lines(allocations([]), inv, jobs([]), rates, start=OCT(1), end=datetime(2026, 11, 1),
                              now=NOW, retire_grace=timedelta(hours=96)).collect()
    assert longer["amount"].to_list() == [Decimal("704.00")]


def test_allocation_beyond_capacity_is_over_allocated_not_negative_idle():
    # 1 H100 on c1. Oct 1 00:00-10:00: A and B each hold 1 GPU by job record (2 GPU-hours an
    # hour on 1), so 10 GPU-hours are over-allocated; 10:00-24:00 the GPU is idle. C names a
    # B200, a model c1 has none of: its 2 GPUs × 3 h are over-allocated too. Prices 2.10 / 3.60.
    rates = rate_card([("H100", "reserved", datetime(2026, 1, 1), "2.10"),
                       ("B200", "reserved", datetime(2026, 1, 1), "3.60")])
    inv = gpus([{"gpu_id": 1}])
    jb = jobs([{"job_id": "A", "project": "p", "start": OCT(1, 0), "end": OCT(1, 10)},
               {"job_id": "B", "project": "p", "start": OCT(1, 0), "end": OCT(1, 10)},
               {"job_id": "C", "project": "p", "gpus": 2, "model": "B200", "start": OCT(1, 2), "end": OCT(1, 5)}])
    for mode in ("line", "spread"):
        df = _lines(allocations([]), inv, jb, "2026-10-01", rates, idle_cost=mode)
        rows = {(r["line_kind"], r["job_id"], r["gpu_model"]): r for r in df.to_dicts()}
        # Charges stand: A, B 10 h × 2.10 = 21.00 each; C 6 h × 3.60 = 21.60.
        assert [rows[("charge", j, m)]["amount"] for j, m in (("A", "H100"), ("B", "H100"), ("C", "B200"))] == [
            Decimal("21.00") + (Decimal("14.70") if mode == "spread" else 0),
            Decimal("21.00") + (Decimal("14.70") if mode == "spread" else 0), Decimal("21.60")]
        # Idle is 14 h × 2.10 = 29.40 (never negative; spread halves it over A and B).
        if mode == "line":
            assert rows[("idle", None, "H100")]["amount"] == Decimal("29.40")
        assert df.filter(pl.col("line_kind") == "idle")["amount"].min() is None or mode == "line"
        # Over-allocated: H100 10 h = 21.00 (A, B); B200 6 h = 21.60 (C); memo lines.
        over = {r["gpu_model"]: (r["gpu_hours_allocated"], r["amount"], r["note"], r["billed"])
                for r in df.filter(pl.col("line_kind") == "over-allocated").to_dicts()}
        assert over == {"H100": (pytest.approx(10), Decimal("21.00"), "jobs: A, B", False),
                        "B200": (pytest.approx(6), Decimal("21.60"), "jobs: C", False)}
        # charges + idle = capacity (24 × 2.10 = 50.40) + over-allocated (42.60) = 93.00.
        assert df.filter(pl.col("billed"))["amount"].sum() == Decimal("93.00")
    notes, _ = statement_notes(df)
    assert any(n.startswith("over-allocated: 16.000 GPU-hours") for n in notes)


def test_a_period_not_over_is_provisional_and_bills_idle_only_to_the_data():
    # Issue 7 §3: November with data to Nov 7 00:00. 1 GPU at 1.00; J ran Nov 1 (24 h). Idle is
    # 6 × 24 − 24 = 120 h = 120.00, not the 30 × 24 − 24 = 696.00 (23 days of idle past the data)
    # billed before.
    rates = rate_card([("H100", "reserved", datetime(2026, 1, 1), "1.00")])
    inv = gpus([{"gpu_id": 1}])
    al = allocations([("J", 1, datetime(2026, 11, 1), datetime(2026, 11, 2))])
    jb = jobs([{"job_id": "J", "project": "p"}])
    nov = chargeback_lines(al, inv, jb, rates, start=datetime(2026, 11, 1), end=datetime(2026, 12, 1),
                           now=datetime(2026, 11, 7)).collect()
    assert nov["provisional"].all() and nov["billed_through"].unique().to_list() == [datetime(2026, 11, 7)]
    assert dict(nov.select("line_kind", "amount").iter_rows()) == {"charge": Decimal("24.00"), "idle": Decimal("120.00")}
    notes, _ = statement_notes(nov)
    assert notes[0].startswith("provisional: the period runs to 2026-12-01 00:00 UTC and the data to 2026-11-07 00:00")
    # October, over at that "now": final, billed through its end.
    octo = chargeback_lines(al, inv, jb, rates, start=OCT(1), end=datetime(2026, 11, 1),
                            now=datetime(2026, 11, 7)).collect()
    assert not octo["provisional"].any() and octo["amount"].sum() == Decimal("744.00")


# --- properties -----------------------------------------------------------------------------

INV_ROWS = [{"gpu_id": 1}, {"gpu_id": 2, "model": "B200"},
            {"gpu_id": 3, "uuid": "M", "mig": 1, "fraction": 1 / 7},
            {"gpu_id": 4, "uuid": "M", "mig": 2, "fraction": 3 / 7}]
alloc_st = st.lists(st.tuples(st.integers(0, 4 * 24 * 60), st.integers(1, 3 * 24 * 60), st.sampled_from([1, 2, 3, 4]),
                              st.sampled_from([1.0, 0.46, 0.5])), max_size=6)


@pytest.mark.slow
@settings(max_examples=30, deadline=None)
@given(alloc_st, st.lists(st.integers(1, 7 * 24 - 1), max_size=4, unique=True))
def test_splitting_a_period_and_summing_equals_the_whole(allocs, cuts_h):
    base = OCT(1)
    rates = rate_card([("H100", "reserved", datetime(2026, 1, 1), "2.10"), ("H100", "reserved", OCT(3), "2.35"),
                       ("B200", "reserved", datetime(2026, 1, 1), "3.60")])
    al = allocations([(f"j{i}", g, base + timedelta(minutes=s), base + timedelta(minutes=s + d), f)
                      for i, (s, d, g, f) in enumerate(allocs)])
    jb = jobs([{"job_id": f"j{i}", "project": "p"} for i in range(len(allocs))])
    bounds = [base, *sorted(base + timedelta(hours=h) for h in cuts_h), base + timedelta(days=7)]
    run = lambda s, e: chargeback_lines(al, gpus(INV_ROWS), jb, rates, start=s, end=e, now=NOW).collect()  # noqa: E731
    whole = run(bounds[0], bounds[-1])
    parts = pl.concat([run(s, e) for s, e in zip(bounds, bounds[1:])])
    # Whole hours at cent prices: every part's capacity cost is exact, so totals match to the cent,
    # unless something is over-allocated: a pool's billed total is then capacity × price + the
    # over-allocated cost, which at minute grain is not whole cents, and each part rounds its own
    # pools (billed and memo) half-up. Found by hypothesis: j0 0.46 and j1 1.0 of the B200 from
    # 00:00, cut at 02:00 -> the parts bill 1373.74 + memo 3.34, the whole 1373.75 + 3.35.
    over = pl.col("line_kind") == "over-allocated"
    if whole.filter(over).is_empty() and parts.filter(over).is_empty():
        assert parts["amount"].sum() == whole["amount"].sum()
    else:
        pools = whole.filter(pl.col("currency").is_not_null()).select("gpu_model", "tier").n_unique()
        slack = Decimal("0.01") * (len(bounds) - 1) * pools * 2  # a cent per part, pool and (billed, memo)
        assert abs(parts["amount"].sum() - whole["amount"].sum()) <= slack
    key = ["line_kind", "job_id", "gpu_model"]
    w = whole.group_by(key).agg(pl.col("gpu_hours_allocated").sum(), pl.col("amount").sum())
    p = parts.group_by(key).agg(pl.col("gpu_hours_allocated").sum(), pl.col("amount").sum())
    joined = w.join(p, on=key, how="full", coalesce=True, nulls_equal=True).fill_null(0)
    assert ((joined["gpu_hours_allocated"] - joined["gpu_hours_allocated_right"]).abs() < 1e-6).all()
    # Each line is rounded on its own: a part may shift at most a cent per part.
    diff = (joined["amount"].cast(pl.Float64) - joined["amount_right"].cast(pl.Float64)).abs()
    assert (diff <= 0.01 * (len(bounds) - 1) + 1e-9).all()
