"""The named stages of budget_burn and job_funding (issue 22), each on its own, numbers by hand.
Org: acme → prog → p1, p2; acme → p3. November budgets (normalised GPU-hours), as_of Nov 21."""

from __future__ import annotations

from datetime import date, datetime, timedelta

import polars as pl
import pytest

from gpuledger.analytics import budget as bg
from gpuledger.analytics.tree import Tree, closure
from tests.helpers.analytics_frames import allocations, budgets, gpus, jobs, org, rate_card

NOV = lambda d, h=0, m=0: datetime(2026, 11, d, h, m)
AS_OF = NOV(21)
TREE = org([("acme", None, 1), ("prog", "acme", 1), ("p1", "prog", 1), ("p2", "prog", 1), ("p3", "acme", 1)])
MONTH = (date(2026, 11, 1), date(2026, 12, 1))


def _own(rows):
    return bg.own_budgets(budgets(rows), as_of=AS_OF)


def test_own_budgets_keep_the_period_containing_as_of():
    own = _own([("p1", *MONTH, "1000"), ("p1", date(2026, 10, 1), date(2026, 11, 1), "5")])  # October's: over
    assert list(own) == ["p1"] and own["p1"]["budget_gpu_hours"] == 1000.0
    with pytest.raises(ValueError, match=r"'p1' has two budgets.*2026-11-01\.\.2026-12-01 and 2026-11-15"):
        _own([("p1", *MONTH, "1000"), ("p1", date(2026, 11, 15), date(2026, 12, 15), "7")])


def test_rolled_budgets_add_each_budget_once():
    # prog has none: p1 1000 + p2 100 = 1100; acme has none: prog's 1100 + p3 500 = 1600.
    rolled = bg.rolled_budgets(Tree.from_frame(TREE), _own([(n, *MONTH, b) for n, b in
                                                            (("p1", "1000"), ("p2", "100"), ("p3", "500"))]))
    got = {n: (b, own) for n, _, _, b, own in rolled.iter_rows()}
    assert got == {"acme": (1600.0, False), "prog": (1100.0, False), "p1": (1000.0, True),
                   "p2": (100.0, True), "p3": (500.0, True)}
    # acme's own 10000 caps everything below: it shows 10000, not 10000 + 1600.
    rolled = bg.rolled_budgets(Tree.from_frame(TREE), _own([("acme", *MONTH, "10000"), ("p1", *MONTH, "1000")]))
    assert dict(rolled.select("node", "budget_gpu_hours").iter_rows()) == {"acme": 10000.0, "prog": 1000.0,
                                                                           "p1": 1000.0}
    assert bg.rolled_budgets(Tree.from_frame(TREE), {}).is_empty()


def test_project_hourly_use_weighs_by_the_rate_card():
    """J (p1) holds a B200 (weight 2.0) 3 h: 3 pieces of 2.0; K (p2) an A40 the rate card has no
    row for, 1 h: counts at 1.0 and is listed as unweighted."""
    inv = gpus([{"gpu_id": 2, "model": "B200"}, {"gpu_id": 6, "uuid": "G6", "model": "A40"}])
    rates = rate_card([("B200", "reserved", datetime(2026, 1, 1), "3.60", 2.0)])
    jb = jobs([{"job_id": "J", "project": "p1", "start": NOV(20)}, {"job_id": "K", "project": "p2", "start": NOV(20)}])
    al = allocations([("J", 2, NOV(20), NOV(20, 3)), ("K", 6, NOV(20), NOV(20, 1))])
    use = bg.project_hourly_use(al, inv, jb, rates, start=NOV(1), as_of=AS_OF, default_tier="reserved").collect()
    p1, p2 = use.filter(pl.col("project") == "p1"), use.filter(pl.col("project") == "p2")
    assert p1.height == 3 and p1["gpu_hours_normalized"].to_list() == [2.0] * 3 and p1["_unweighted"].sum() == 0
    assert p2["gpu_hours_normalized"].to_list() == [1.0] and p2["_unweighted"].to_list() == [1.0]
    assert p2["_models"].to_list() == [["A40"]]


def _use(rows):
    """rows: (project, piece_start, normalised GPU-hours); hour pieces, all weighed."""
    return pl.LazyFrame({"project": [r[0] for r in rows], "piece_start": [r[1] for r in rows],
                         "piece_end": [r[1] + timedelta(hours=1) for r in rows],
                         "gpu_hours_normalized": [float(r[2]) for r in rows], "_unweighted": [0.0] * len(rows),
                         "_models": [[] for _ in rows]}, schema_overrides={"_models": pl.List(pl.String)})


def test_consumed_per_node_sums_the_subtree_inside_the_period():
    """prog, November: p1 2.0 in the hour from Nov 13 23:00 and p2 4.0 at Nov 20 10:00 = 6.0;
    October's 9.0 is outside. Burn since Nov 13 23:30: half of p1's hour (1.0) + p2's 4.0 = 5.0."""
    nodes = pl.LazyFrame({"node": ["prog"], "period_start": [MONTH[0]], "period_end": [MONTH[1]]})
    use = _use([("p1", NOV(13, 23), 2), ("p2", NOV(20, 10), 4), ("p1", datetime(2026, 10, 30), 9)])
    (row,) = bg.consumed_per_node(nodes, closure(TREE), use, burn_start=NOV(13, 23, 30)).collect().iter_rows(named=True)
    assert (row["consumed_gpu_hours"], row["_burn"]) == (6.0, 5.0)
    assert row["unweighted_gpu_hours"] == 0.0 and row["unweighted_models"] == ""


def test_burn_status_projects_exhaustion_at_the_burn_rate():
    """Burn 14 over the 7-day window = 2 a day. a: 100 − 30 = 70 left, 35 days → Dec 26, after the
    period: funded. b: 50 − 40 = 10 left, 5 days → Nov 26: at-risk. c: 60 of 50: exhausted, no
    projection. d: nothing consumed: funded, no projection. e: its period began Nov 19, so the
    window is 2 days: 4 / 2 = 2 a day."""
    e_period = (date(2026, 11, 19), date(2026, 12, 19))
    nodes = pl.LazyFrame({"node": list("abcde"), "period_start": [MONTH[0]] * 4 + [e_period[0]],
                          "period_end": [MONTH[1]] * 4 + [e_period[1]], "budget_gpu_hours": [100.0, 50, 50, 10, 100]})
    consumed = pl.LazyFrame({"node": list("abce"), "period_start": [MONTH[0]] * 3 + [e_period[0]],
                             "consumed_gpu_hours": [30.0, 40, 60, 4], "_burn": [14.0, 14, 14, 4],
                             "unweighted_gpu_hours": [0.0] * 4, "unweighted_models": ["", "", "A40", ""]})
    out = {r["node"]: r for r in bg.burn_status(nodes, consumed, as_of=AS_OF, burn_window=timedelta(days=7))
           .collect().iter_rows(named=True)}
    assert out["a"]["burn_gpu_hours_per_day"] == 2.0 and out["a"]["projected_exhaustion"] == datetime(2026, 12, 26)
    assert out["a"]["status"] == "funded" and out["a"]["remaining_gpu_hours"] == 70.0
    assert out["b"]["projected_exhaustion"] == NOV(26) and out["b"]["status"] == "at-risk"
    assert out["c"]["status"] == "exhausted" and out["c"]["projected_exhaustion"] is None
    assert out["c"]["unweighted_models"] == "A40" and out["a"]["unweighted_models"] is None  # "" means none
    assert (out["d"]["consumed_gpu_hours"], out["d"]["status"], out["d"]["projected_exhaustion"]) == (0.0, "funded",
                                                                                                        None)
    assert out["e"]["burn_gpu_hours_per_day"] == 2.0  # 96 left / 2 a day = 48 days: Jan 8, after Dec 19
    assert out["e"]["status"] == "funded"


def test_budget_verdicts_walk_each_project_path():
    """prog has 10 left, p2 −1: p1 is funded through prog; p2 is exhausted at itself; p3 and acme
    have no budget on their path."""
    got = {p: (ok, why) for p, ok, why in
           bg.budget_verdicts(Tree.from_frame(TREE), {"prog": 10.0, "p2": -1.0}).collect().iter_rows()}
    assert got == {"acme": (False, "no budget"), "prog": (True, None), "p1": (True, None),
                   "p2": (False, "budget exhausted at p2"), "p3": (False, "no budget")}


def test_funding_status_caps_the_minimum_runtime():
    """now Nov 21 00:00. A (p1, 10 h declared, started Nov 20 20:00): capped at 8 h, protected
    until Nov 21 04:00. B (p1, no minimum): not funded. C (p3, no budget). D (ended Nov 20): gone.
    E (project "zz" not in the tree)."""
    jb = jobs([{"job_id": "A", "project": "p1", "start": NOV(20, 20), "min_runtime_s": 36_000},
               {"job_id": "B", "project": "p1", "start": NOV(20)},
               {"job_id": "C", "project": "p3", "start": NOV(20), "min_runtime_s": 3_600},
               {"job_id": "D", "project": "p1", "start": NOV(19), "end": NOV(20), "min_runtime_s": 3_600},
               {"job_id": "E", "project": "zz", "start": NOV(20), "min_runtime_s": 3_600}])
    ok = pl.LazyFrame({"project": ["p1", "p3"], "budget_ok": [True, False], "unfunded_reason": [None, "no budget"]},
                      schema_overrides={"unfunded_reason": pl.String})
    out = {r["job_id"]: r for r in bg.funding_status(jb, ok, now=AS_OF, min_runtime_cap=timedelta(hours=8))
           .collect().iter_rows(named=True)}
    assert set(out) == {"A", "B", "C", "E"}
    a = out["A"]
    assert (a["funded"], a["min_runtime_s_effective"], a["protected_until"], a["protected"]) == (True, 28_800,
                                                                                                  NOV(21, 4), True)
    assert (out["B"]["funded"], out["B"]["unfunded_reason"]) == (False, "no minimum runtime declared")
    assert (out["C"]["funded"], out["C"]["unfunded_reason"], out["C"]["protected_until"]) == (False, "no budget", None)
    assert out["E"]["unfunded_reason"] == "project not in org tree"
