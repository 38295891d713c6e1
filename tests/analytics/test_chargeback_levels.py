"""The last stages of chargeback_lines (issue 22): the rounded trees read out at the job, project
and node level, and the shaping every level shares. The day of test_chargeback_stages.py:
Oct 1 2026, cluster c1, whole H100s reserved at 2.00 /h, org acme → alpha, beta.
  J (alpha) 6 h = 12.00; K (beta) 0.5 h = 1.00; L (beta) 1 h = 2.00; idle 41 H100-hours = 82.00;
  0.5 GPU-h over-allocated at 02:00 = 1.00 (a memo naming J, K, L); GPU 3, an A100, has no
  rate: its 24 h are unpriced idle capacity.
Σ billed = 12 + 1 + 2 + 82 = 97.00 = capacity 48 h × 2.00 + over-allocated 1.00."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import polars as pl

from gpuledger.analytics import chargeback as cb
from tests.analytics.test_chargeback_stages import ALLOC, END, INV, JOBS, RATES, START  # the same day
from tests.helpers.analytics_frames import allocations, jobs, org

D = Decimal
TREE = org([("acme", None, 1), ("alpha", "acme", 1), ("beta", "acme", 1)])


def _trees(alloc=ALLOC, jobs_=JOBS):
    """The stages before the level read-out, as chargeback_lines runs them (idle on its own line)."""
    cap, pieces, prices = cb.priced_pieces(alloc, INV, jobs_, RATES, start=START, end=END, now=END, billed_end=END,
                                           default_tier="reserved", retire_grace=timedelta(hours=24))
    per_hour = cb.hourly_balance(cap, pieces, prices)
    charges = cb.charge_lines(pieces)
    over, unknown = cb.over_lines(per_hour, pieces), cb.capacity_unknown_lines(charges)
    billed = cb.rounded_billed(charges.drop("_known").with_columns(_idle_raw=pl.lit(0).cast(cb.RAW)),
                               cb.idle_lines(per_hour), jobs_, TREE)
    unpriced = cb.unpriced_by_project(cb.unpriced_lines(pieces, per_hour), billed.job_meta)
    return billed, cb.rounded_memo(over, unknown), over.filter(pl.col("currency").is_null()), unpriced


def _rows(frames, key):
    """(line_kind, key) -> (amount, GPU-hours, note) over every frame of a level."""
    out = pl.concat(frames, how="diagonal_relaxed").collect()
    return {(r["line_kind"], r[key]): (r["amount"], round(r["gpu_hours_allocated"], 6), r.get("note"))
            for r in out.iter_rows(named=True)}


def test_unpriced_lines_name_their_project():
    """Unpriced idle capacity has no job: "(idle)"; a job without a record: "(no job record)"."""
    unpriced = pl.LazyFrame({"cluster": ["c1"] * 3, "job_id": [None, "X", "J"], "note": ["n"] * 3,
                             "gpu_hours_allocated": [1.0, 2.0, 3.0]}, schema_overrides={"job_id": pl.String})
    meta = JOBS.select("cluster", "job_id", "project", "user_name")
    got = cb.unpriced_by_project(unpriced, meta).collect()
    assert dict(got.select("gpu_hours_allocated", "project").iter_rows()) == {
        1.0: cb.IDLE, 2.0: cb.NO_JOB_RECORD, 3.0: "alpha"}


def test_job_level_lines_are_the_leaves():
    got = _rows(cb.job_level_lines(*_trees()), "job_id")
    assert got[("charge", "J")] == (D("12.00"), 6.0, None)  # 6 h × 2.00
    assert got[("charge", "K")] == (D("1.00"), 0.5, None)  # 0.5 h × 2.00
    assert got[("charge", "L")] == (D("2.00"), 1.0, None)
    assert got[("idle", None)] == (D("82.00"), 41.0, None)  # 41 h × 2.00
    assert got[("over-allocated", None)] == (D("1.00"), 0.5, "jobs: J, K, L")  # 0.5 h × 2.00, a memo
    amount, hours, note = got[("unpriced", None)]  # GPU 3: 24 h of A100, no rate, no money
    assert (amount, hours) == (None, 24.0) and note.startswith("no price for A100/reserved")
    assert len(got) == 6


def test_project_level_lines_sum_their_jobs():
    frames = cb.project_level_lines(*_trees())
    got = _rows(frames, "project")
    assert got[("charge", "alpha")][:2] == (D("12.00"), 6.0)  # J
    assert got[("charge", "beta")][:2] == (D("3.00"), 1.5)  # K 1.00 + L 2.00; 0.5 h + 1 h
    assert got[("idle", cb.IDLE)][:2] == (D("82.00"), 41.0)
    assert got[("over-allocated", cb.OVER)] == (D("1.00"), 0.5, "jobs: J, K, L")
    assert got[("unpriced", cb.IDLE)][:2] == (None, 24.0)
    billed = pl.concat(frames, how="diagonal_relaxed").collect().filter(pl.col("line_kind").is_in(["charge", "idle"]))
    assert billed["amount"].sum() == D("97.00")  # 12 + 3 + 82


def test_node_level_lines_sum_their_subtrees():
    got = _rows(cb.node_level_lines(*_trees(), TREE), "node")
    assert got[("charge", "acme")][:2] == (D("15.00"), 7.5)  # alpha 12.00 + beta 3.00
    assert got[("charge", "alpha")][:2] == (D("12.00"), 6.0)
    assert got[("charge", "beta")][:2] == (D("3.00"), 1.5)
    assert got[("idle", cb.IDLE)][:2] == (D("82.00"), 41.0)  # its own root: not under acme
    assert got[("over-allocated", cb.OVER)] == (D("1.00"), 0.5, "jobs: J, K, L")
    assert got[("unpriced", cb.IDLE)][:2] == (None, 24.0)


def test_over_allocation_in_hours_without_a_rate_has_no_money():
    """M and N each hold all of GPU 3 (A100, no rate) 00:00–01:00: 2 GPU-h on 1 GPU-h of
    capacity, 1 GPU-h over-allocated that no rate prices: a line with hours and jobs, no amount."""
    alloc = allocations([("M", 3, START, START + timedelta(hours=1)), ("N", 3, START, START + timedelta(hours=1))])
    both = jobs([{"job_id": "M", "project": "alpha", "model": "A100"},
                 {"job_id": "N", "project": "beta", "model": "A100"}])
    trees = _trees(alloc, both)
    (over,) = trees[2].collect().iter_rows(named=True)
    assert (over["gpu_hours_allocated"], over["note"]) == (1.0, "jobs: M, N")
    project = _rows(cb.project_level_lines(*trees), "project")
    assert project[("over-allocated", cb.OVER)] == (None, 1.0, "jobs: M, N")
    node = _rows(cb.node_level_lines(*trees, TREE), "node")
    assert node[("over-allocated", cb.OVER)] == (None, 1.0, "jobs: M, N")


def test_shaped_lines_order_columns_and_period():
    """Lines sort by kind (charge, idle, over-allocated, capacity-unknown, unpriced), then keys;
    only charge and idle are billed; a period not over at ``now`` is provisional and billed
    through ``now``; a level without model/tier columns gets them NULL."""
    money = pl.Decimal(38, 2)
    frames = [
        pl.LazyFrame({"line_kind": ["unpriced"], "node": ["b"], "currency": [None], "gpu_hours_allocated": [2.0],
                      "amount": [None], "idle_amount_included": [None], "note": ["no price"]},
                     schema_overrides={"currency": pl.String, "amount": money, "idle_amount_included": money}),
        pl.LazyFrame({"line_kind": ["charge", "idle", "charge"], "node": ["b", cb.IDLE, "a"],
                      "currency": ["USD"] * 3, "gpu_hours_allocated": [1.0, 3.0, 2.0],
                      "amount": [D("1.00"), D("3.00"), D("2.00")], "idle_amount_included": [D("0")] * 3,
                      "note": [None] * 3, "amount_raw": [D("1"), D("3"), D("2")], "_idle_raw": [D("0")] * 3},
                     schema_overrides={"note": pl.String, "amount": money, "idle_amount_included": money,
                                       "amount_raw": cb.RAW, "_idle_raw": cb.RAW}),
    ]
    now = START + timedelta(hours=12)
    out = cb.shaped_lines(frames, ["node"], start=START, end=END, now=now, billed_end=now, exact=True).collect()
    assert out.select("line_kind", "node").rows() == [("charge", "a"), ("charge", "b"), ("idle", cb.IDLE),
                                                      ("unpriced", "b")]
    assert out["billed"].to_list() == [True, True, True, False]
    assert out["provisional"].all() and (out["billed_through"] == now).all()
    assert out["gpu_model"].is_null().all() and out["tier"].is_null().all()
    assert out["amount_exact"].to_list() == [D(2), D(1), D(3), None]
    assert out.columns[:7] == ["period_start", "period_end", "billed_through", "provisional", "line_kind", "billed",
                               "node"]


def test_the_levels_priced_once_are_each_level_priced_alone():
    # a period's close asks all three levels of one pricing (chargeback_lines_at, issue 41): the
    # same lines, to the last digit, as each level asked on its own (J, K, L, idle, over, unpriced)
    args = {"start": START, "end": END, "now": END, "org_nodes": TREE, "default_tier": "reserved", "exact": True}
    together = cb.chargeback_lines_at(ALLOC, INV, JOBS, RATES, levels=("job", "project", "node"), **args)
    for level, lines in together.items():
        alone = cb.chargeback_lines(ALLOC, INV, JOBS, RATES, level=level, **args).collect()
        both = lines.collect()
        assert both.height == alone.height > 0
        assert both.equals(alone), level
    assert sum(together["project"].collect().filter(pl.col("billed"))["amount"]) == D("97.00")
