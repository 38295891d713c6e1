"""Chargeback: month boundary, mid-month rate change, idle line vs spread, and the invariant."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuledger.analytics.chargeback import chargeback_lines, chargeback_totals, period_bounds
from tests._analytics_frames import allocations, gpus, jobs, org, rate_card

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


def test_missing_rate_is_an_error_naming_the_model():
    inv = gpus([{"gpu_id": 1, "model": "B300"}])
    with pytest.raises(ValueError, match="B300/reserved"):
        _lines(allocations([]), inv, jobs([]), "2026-10")


# --- properties -----------------------------------------------------------------------------

def _expected_total(inventory: list[dict], rates: list[tuple], start: datetime, end: datetime) -> Decimal:
    """Σ capacity × price by hand: each physical GPU, each hour slice of [start, end), priced at
    the rate in force at the slice start."""
    total = Decimal(0)
    physical = {(g.get("uuid", f"GPU-{g['gpu_id']}")): g.get("model", "H100") for g in inventory}
    t = start
    while t < end:
        nxt = min(t.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1), end)
        hours = Decimal(int((nxt - t).total_seconds())) / Decimal(3600)
        for model in physical.values():
            price = max((r for r in rates if r[0] == model and r[2] <= t), key=lambda r: r[2])[3]
            total += hours * Decimal(price)
        t = nxt
    return total.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)


INV_ROWS = [{"gpu_id": 1}, {"gpu_id": 2, "model": "B200"},
            {"gpu_id": 3, "uuid": "M", "mig": 1, "fraction": 1 / 7},
            {"gpu_id": 4, "uuid": "M", "mig": 2, "fraction": 3 / 7}]
alloc_st = st.lists(st.tuples(st.integers(0, 4 * 24 * 60), st.integers(1, 3 * 24 * 60), st.sampled_from([1, 2, 3, 4]),
                              st.sampled_from([1.0, 0.46, 0.5])), max_size=6)
price_st = st.decimals(min_value=Decimal("0.01"), max_value=Decimal("9.999999"), places=6)


@settings(max_examples=50, deadline=None)
@given(alloc_st, price_st, price_st, price_st, st.integers(0, 5 * 24 * 60), st.integers(1, 3 * 24 * 60),
       st.integers(0, 4 * 24), st.sampled_from(["line", "spread"]))
def test_invariant_charges_plus_idle_equal_capacity_cost(allocs, p1, p2, p3, start_min, len_min, change_h, idle):
    base = OCT(1)
    rates = [("H100", "reserved", datetime(2026, 1, 1), str(p1)), ("H100", "reserved", base + timedelta(hours=change_h), str(p2)),
             ("B200", "reserved", datetime(2026, 1, 1), str(p3))]
    al = allocations([(f"j{i}", g, base + timedelta(minutes=s), base + timedelta(minutes=s + d), f)
                      for i, (s, d, g, f) in enumerate(allocs)])
    jb = jobs([{"job_id": f"j{i}", "project": "p"} for i in range(len(allocs))])
    start = base + timedelta(minutes=start_min)
    end = start + timedelta(minutes=len_min)
    df = chargeback_lines(al, gpus(INV_ROWS), jb, rate_card(rates), start=start, end=end, now=NOW,
                          idle_cost=idle).collect()
    assert df["amount"].sum() == _expected_total(INV_ROWS, rates, start, end)


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
    # Whole hours at cent prices: every part's capacity cost is exact, so totals match to the cent.
    assert parts["amount"].sum() == whole["amount"].sum()
    key = ["line_kind", "job_id", "gpu_model"]
    w = whole.group_by(key).agg(pl.col("gpu_hours_allocated").sum(), pl.col("amount").sum())
    p = parts.group_by(key).agg(pl.col("gpu_hours_allocated").sum(), pl.col("amount").sum())
    joined = w.join(p, on=key, how="full", coalesce=True, nulls_equal=True).fill_null(0)
    assert ((joined["gpu_hours_allocated"] - joined["gpu_hours_allocated_right"]).abs() < 1e-6).all()
    # Each line is rounded on its own: a part may shift at most a cent per part.
    diff = (joined["amount"].cast(pl.Float64) - joined["amount_right"].cast(pl.Float64)).abs()
    assert (diff <= 0.01 * (len(bounds) - 1) + 1e-9).all()
