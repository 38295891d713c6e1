"""Budget burn, projected exhaustion and job funding, derived by hand."""

from __future__ import annotations

from datetime import date, datetime

import pytest

from gpuledger.analytics.budget import budget_burn, job_funding
from tests._analytics_frames import allocations, budgets, gpus, jobs, org, rate_card

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
