"""Budget burn, projected exhaustion and job funding, derived by hand."""

from __future__ import annotations

from datetime import date, datetime

import polars as pl
import pytest

from gpuledger.analytics.budget import budget_burn, job_funding
from tests.helpers.analytics_frames import allocations, budgets, gpus, jobs, org, rate_card

NOV = lambda d, h=0: datetime(2026, 11, d, h)  # noqa: E731
AS_OF = NOV(21)

TREE = org([("acme", None, 1), ("prog", "acme", 1), ("p1", "prog", 1), ("p2", "prog", 1), ("p3", "acme", 1)])
INV = gpus([{"gpu_id": 1}, {"gpu_id": 2, "model": "B200"}, {"gpu_id": 3}, {"gpu_id": 4}, {"gpu_id": 5}])
RATES = rate_card([("H100", "reserved", datetime(2026, 1, 1), "2.10", 1.0),
                   ("B200", "reserved", datetime(2026, 1, 1), "3.60", 2.0)])
BUDGETS = budgets([(n, date(2026, 11, 1), date(2026, 12, 1), b)
                   for n, b in (("p1", "1000"), ("p2", "100"), ("p3", "500"), ("acme", "10000"))]
                  + [("p1", date(2026, 10, 1), date(2026, 11, 1), "5")])  # last month's: ignored
JOBS = jobs([
    {"job_id": "J1", "project": "p1", "start": NOV(1), "end": NOV(11)},
    {"job_id": "J2", "project": "p1", "start": NOV(14), "min_runtime_s": 36_000},
    {"job_id": "J3", "project": "p2", "start": NOV(2), "end": NOV(4, 2)},
    {"job_id": "J4", "project": "p3", "start": NOV(20), "min_runtime_s": 172_800},
    {"job_id": "J6", "project": "p3", "start": NOV(20, 23), "min_runtime_s": 7_200},
    {"job_id": "J7", "project": "p2", "start": NOV(20), "min_runtime_s": 3_600},
    {"job_id": "J8", "project": "p3", "start": NOV(20), "min_runtime_s": 0},
])
# J6, J7 and J8 have no device allocations (as jobs from the CSV importer, Kubernetes or Slurm):
# each counts as 1 H100 (jobs.gpus, jobs.gpu_model) from its start: J6 1 h, J7 24 h, J8 24 h.
ALLOCS = allocations([
    ("J1", 1, NOV(1), NOV(11)),         # H100 240 h × 1.0 = 240
    ("J2", 2, NOV(14), None),           # B200 168 h to as_of × 2.0 = 336
    ("J3", 3, NOV(2), NOV(4, 2)),       # p2: 2 H100 × 50 h = 100
    ("J3", 4, NOV(2), NOV(4, 2)),
    ("J4", 5, NOV(20), None),           # p3: 24 h
])


def _burn():
    return {r["node"]: r for r in budget_burn(ALLOCS, INV, JOBS, TREE, BUDGETS, RATES, as_of=AS_OF)
            .collect().to_dicts()}


def test_burn_rate_projection_and_status():
    b = _burn()
    p1 = b["p1"]
    # consumed 240 + 336 = 576 of 1000; last 7 days only J2: 336 / 7 = 48 a day;
    # 424 left / 48 = 8.8333 days = 8 d 20 h after Nov 21 -> Nov 29 20:00, before Dec 1: at risk.
    assert p1["consumed_gpu_hours"] == pytest.approx(576)
    assert p1["remaining_gpu_hours"] == pytest.approx(424)
    assert p1["burn_gpu_hours_per_day"] == pytest.approx(48)
    assert abs((p1["projected_exhaustion"] - NOV(29, 20)).total_seconds()) < 1
    assert p1["status"] == "at-risk"
    # p2: J3's 100 + J7's 24 (job level) = 124 of 100: exhausted, no projection.
    assert b["p2"]["consumed_gpu_hours"] == pytest.approx(124)
    assert b["p2"]["remaining_gpu_hours"] == pytest.approx(-24)
    assert b["p2"]["status"] == "exhausted"
    assert b["p2"]["projected_exhaustion"] is None
    # p3: J4 24 + J6 1 + J8 24 = 49 of 500, all in the last 7 days: 7 a day -> 451 / 7 = 64.4 days: funded.
    assert b["p3"]["consumed_gpu_hours"] == pytest.approx(49)
    assert b["p3"]["burn_gpu_hours_per_day"] == pytest.approx(49 / 7)
    assert b["p3"]["status"] == "funded"


def test_budget_rolls_up_the_tree():
    b = _burn()
    # prog has no budget of its own: p1 + p2 = 1100, consumed 576 + 124 = 700, burn 48 + 24/7 a day
    # -> 400 left lasts 7.8 days, past as_of but before Dec 1: at risk.
    assert b["prog"]["budget_gpu_hours"] == pytest.approx(1100)
    assert b["prog"]["consumed_gpu_hours"] == pytest.approx(700)
    assert b["prog"]["status"] == "at-risk"
    # acme has its own 10000; consumed everything below: 576 + 124 + 49 = 749.
    assert b["acme"]["budget_gpu_hours"] == pytest.approx(10_000)
    assert b["acme"]["consumed_gpu_hours"] == pytest.approx(749)
    assert b["acme"]["status"] == "funded"
    assert b["p1"]["period_start"] == date(2026, 11, 1)  # October's budget row is not the active one


def test_job_funding_and_protection():
    burn = budget_burn(ALLOCS, INV, JOBS, TREE, BUDGETS, RATES, as_of=AS_OF)
    f = {r["job_id"]: r for r in job_funding(JOBS, burn, TREE, now=AS_OF).collect().to_dicts()}
    assert "J1" not in f and "J3" not in f  # ended jobs are not judged
    # J2: budget left, min runtime 10 h capped at 8 h -> funded, protected only until Nov 14 08:00.
    assert f["J2"]["funded"] and f["J2"]["min_runtime_s_effective"] == 8 * 3600
    assert f["J2"]["protected_until"] == NOV(14, 8) and not f["J2"]["protected"]
    # J6: started 23:00, 2 h minimum -> protected until 01:00, now is 00:00.
    assert f["J6"]["funded"] and f["J6"]["protected"]
    # J7: p2 exhausted.
    assert not f["J7"]["funded"] and "exhausted" in f["J7"]["unfunded_reason"]
    assert not f["J7"]["protected"]
    # J8: no minimum runtime.
    assert not f["J8"]["funded"] and f["J8"]["unfunded_reason"] == "no minimum runtime declared"


# --- issue 8, item 10: roll up once; overlapping budgets; models the rate card cannot weigh ------

def test_budgets_roll_up_once():
    # org (no budget) → program (100 h) → project (60 h), and a sibling project q (40 h) under org.
    tree = org([("org", None, 1), ("program", "org", 1), ("project", "program", 1), ("q", "org", 1)])
    nov = (date(2026, 11, 1), date(2026, 12, 1))
    b = budgets([("program", *nov, "100"), ("project", *nov, "60"), ("q", *nov, "40")])
    got = {r["node"]: r for r in budget_burn(allocations([]), INV, jobs([]), tree, b, RATES, as_of=AS_OF)
           .collect().to_dicts()}
    # program keeps its own 100 (it caps the 60 below it); org has none of its own: program's 100 + q's 40
    # = 140. Today org adds every budget below it: 100 + 60 + 40 = 200.
    assert got["program"]["budget_gpu_hours"] == pytest.approx(100)
    assert got["project"]["budget_gpu_hours"] == pytest.approx(60)
    assert got["org"]["budget_gpu_hours"] == pytest.approx(140)
    assert (got["org"]["budget_own"], got["program"]["budget_own"]) == (False, True)


def test_two_budgets_of_a_node_at_one_time_are_an_error():
    from gpuledger.config import Config

    org_tree = {"name": "acme", "children": [{"name": "p1"}]}
    with pytest.raises(ValueError, match=r"budgets\[0\].*budgets\[1\]|budgets\[1\].*budgets\[0\]"):
        Config.model_validate({"org": org_tree, "budgets": [
            {"node": "p1", "gpu_hours": "100", "period": "2026-11"},
            {"node": "p1", "gpu_hours": "50", "start": "2026-11-15", "end": "2026-12-15"},
        ]})
    # Back to back is fine: November, then December.
    Config.model_validate({"org": org_tree, "budgets": [
        {"node": "p1", "gpu_hours": "100", "period": "2026-11"},
        {"node": "p1", "gpu_hours": "50", "period": "2026-12"},
    ]})
    # In the analytics, a warehouse holding both names both periods.
    b = budgets([("p1", date(2026, 11, 1), date(2026, 12, 1), "100"),
                 ("p1", date(2026, 11, 15), date(2026, 12, 15), "50")])
    with pytest.raises(ValueError, match="2026-11-01..2026-12-01 and 2026-11-15..2026-12-15"):
        budget_burn(allocations([]), INV, jobs([]), TREE, b, RATES, as_of=AS_OF).collect()


def test_budgets_name_the_models_they_could_not_weigh():
    inv = gpus([{"gpu_id": 1}, {"gpu_id": 2, "model": "A30"}])
    al = allocations([("H", 1, NOV(20), NOV(20, 10)), ("A", 2, NOV(20), NOV(20, 4))])
    jb = jobs([{"job_id": "H", "project": "p1", "start": NOV(20), "end": NOV(20, 10)},
               {"job_id": "A", "project": "p1", "start": NOV(20), "end": NOV(20, 4), "model": "A30"},
               # a job-level row with no model at all: 2 h on 1 GPU
               {"job_id": "N", "project": "p1", "start": NOV(20), "end": NOV(20, 2), "model": None}])
    got = {r["node"]: r for r in budget_burn(al, inv, jb, TREE, BUDGETS, RATES, as_of=AS_OF).collect().to_dicts()}
    # H100 10 h × 1.0 weighed; A30 4 h and the model-less 2 h are not in the rate card: counted at
    # 1.0 (consumed 10 + 4 + 2 = 16) and listed: 6 unweighted GPU-hours, models "(no model), A30".
    assert got["p1"]["consumed_gpu_hours"] == pytest.approx(16)
    assert got["p1"]["unweighted_gpu_hours"] == pytest.approx(6)
    assert got["p1"]["unweighted_models"] == "(no model), A30"
    assert got["acme"]["unweighted_models"] == "(no model), A30"     # rolled up the tree
    assert got["p3"]["unweighted_models"] is None and got["p3"]["unweighted_gpu_hours"] == 0


# --- issue 8, item 11: Slurm jobs can be funded ------------------------------------------------

def test_slurm_jobs_take_their_minimum_runtime_from_config_rules():
    from gpuledger.config import MinRuntimeRule

    base = {"project": "p1", "start": NOV(20, 22)}
    jb = jobs([{**base, "job_id": "S1"}, {**base, "job_id": "S2"}, {**base, "job_id": "S3"},
               {**base, "job_id": "S4", "min_runtime_s": 600}, {**base, "job_id": "K1"}]).with_columns(
        source=pl.Series(["slurm-sacct"] * 4 + ["kubernetes"]),
        qos=pl.Series(["high", "normal", "normal", "high", None]),
        partition=pl.Series(["gpu", "gpu", "debug", "gpu", None]),
    )
    rules = [MinRuntimeRule(qos="high", hours=4), MinRuntimeRule(partition="gpu", hours=1),
             MinRuntimeRule(qos="normal", partition="debug", hours=0.5), MinRuntimeRule(qos="high", hours=12)]
    as_tuples = [(r.qos, r.partition, int(r.hours * 3600)) for r in rules]
    burn = budget_burn(ALLOCS, INV, JOBS, TREE, BUDGETS, RATES, as_of=AS_OF)
    f = {r["job_id"]: r for r in job_funding(jb, burn, TREE, now=AS_OF, min_runtime_rules=as_tuples)
         .collect().to_dicts()}
    # S1 (high, gpu): the QOS rule beats the partition rule: 4 h (the first high rule), funded and
    # protected from 22:00 until 02:00, past now (00:00).
    assert f["S1"]["min_runtime_s_effective"] == 4 * 3600 and f["S1"]["funded"] and f["S1"]["protected"]
    # S2 (normal, gpu): only the partition rule: 1 h -> until 23:00, no longer protected at 00:00.
    assert f["S2"]["min_runtime_s_effective"] == 3600 and f["S2"]["funded"] and not f["S2"]["protected"]
    # S3 (normal, debug): the rule naming both: 30 min.
    assert f["S3"]["min_runtime_s_effective"] == 1800
    # S4 declares its own 10 min (TimeMin): it wins over every rule.
    assert f["S4"]["min_runtime_s_effective"] == 600
    # Kubernetes jobs are not Slurm's: no rule applies, no minimum -> unfunded, as before.
    assert f["K1"]["unfunded_reason"] == "no minimum runtime declared"
    # Without rules (today) every Slurm job is unfunded for want of a minimum runtime.
    plain = job_funding(jb, burn, TREE, now=AS_OF).collect()
    assert plain.filter(pl.col("job_id") == "S1")["funded"].item() is False


def test_rules_must_name_a_qos_or_partition():
    from gpuledger.config import MinRuntimeRule

    with pytest.raises(ValueError, match="needs `qos`, `partition` or both"):
        MinRuntimeRule(hours=2)
