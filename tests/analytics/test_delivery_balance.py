"""The delivery balance (analytics.delivery_balance): owed-but-undelivered GPU-hours carried forward."""

from __future__ import annotations

from datetime import datetime, timedelta
from types import SimpleNamespace

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuledger.analytics.delivery_balance import (
    carry_forward,
    credited_usage,
    credits,
    delivery_balance,
    next_balance,
    open_credit,
    period_start,
)
from gpuledger.analytics.fairshare import fair_share
from gpuledger.analytics.queries import credited_node_usage
from gpuledger.analytics.usage import node_usage
from gpuledger.config import Policy
from tests.helpers.analytics_frames import allocations, at, gpus, jobs, org


def _periods(project: str, pairs: list[tuple[float, float]]) -> pl.DataFrame:
    start = datetime(2026, 11, 2)
    return pl.DataFrame({
        "project": [project] * len(pairs),
        "period_start": [start + timedelta(days=7 * k) for k in range(len(pairs))],
        "gpu_hours_owed": [float(o) for o, _ in pairs],
        "gpu_hours_allocated": [float(a) for _, a in pairs],
    })


def test_a_shortfall_is_carried_and_paid_back_first_burst_never_goes_negative():
    out = carry_forward(_periods("a", [(10, 4), (10, 20), (10, 30), (0, 0)])).collect()
    rows = out.select("gpu_hours_carried_in", "gpu_hours_due", "gpu_hours_delivered", "gpu_hours_repaid",
                      "gpu_hours_above_due", "gpu_hours_balance").rows()
    # week 1: owed 10, got 4 -> delivered 4, 6 carried.
    # week 2: due 10 + 6 = 16, got 20 -> delivered 16, repaid 16 - min(20, 10) = 6, 4 above due, balance 0.
    # week 3: due 10, got 30 -> delivered 10, 20 above due (burst), balance stays 0, never negative.
    # week 4: nothing owed or given.
    assert rows == [(0, 10, 4, 0, 0, 6), (6, 16, 16, 6, 4, 0), (0, 10, 10, 0, 20, 0), (0, 0, 0, 0, 0, 0)]


def test_a_balance_grows_while_starved_then_one_good_week_repays_it():
    out = carry_forward(_periods("a", [(10, 0), (10, 0), (5, 30)])).collect()
    # balances 10, 20, then max(0, 20 + 5 - 30) = 0: due 25, delivered 25, repaid 25 - 5 = 20, above 5.
    assert out["gpu_hours_balance"].to_list() == [10, 20, 0]
    assert out.row(2, named=True)["gpu_hours_repaid"] == 20
    assert out.row(2, named=True)["gpu_hours_above_due"] == 5


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 1000), st.floats(0, 1000)), min_size=1, max_size=12))
def test_the_frame_is_the_one_period_rule_iterated(pairs):
    out = carry_forward(_periods("a", pairs)).collect()
    balance = 0.0
    for (owed, allocated), row in zip(pairs, out.iter_rows(named=True), strict=True):
        assert row["gpu_hours_carried_in"] == pytest.approx(balance, abs=1e-6)
        balance = next_balance(balance, owed, allocated)
        assert row["gpu_hours_balance"] == pytest.approx(balance, abs=1e-6)
        assert row["gpu_hours_delivered"] + row["gpu_hours_above_due"] == pytest.approx(allocated, abs=1e-6)
        assert row["gpu_hours_delivered"] <= row["gpu_hours_due"] + 1e-6
    # nothing lost: what was owed is delivered or still carried
    assert out["gpu_hours_delivered"].sum() + balance == pytest.approx(sum(o for o, _ in pairs), abs=1e-4)


def test_open_credit_is_what_is_left_of_the_carried_balance():
    # 6 carried in; so far this week owed 10, got 12: 2 above what the week owes repay 2 -> 4 open.
    assert open_credit(6, 10, 12) == 4
    assert open_credit(6, 10, 30) == 0  # repaid in full, the rest is burst
    assert open_credit(6, 10, 5) == 6  # not even this week's owed yet: nothing repaid
    assert credited_usage({"a": 10.0, "b": 3.0}, {"a": 4.0, "b": 5.0}) == {"a": 6.0, "b": 0.0}


def test_periods_are_whole_windows_from_a_monday():
    week = timedelta(days=7)
    # 2026-11-01 is a Sunday: its week began Monday 2026-10-26
    assert period_start(datetime(2026, 11, 1, 13), week) == datetime(2026, 10, 26)
    assert period_start(datetime(2026, 11, 2), week) == datetime(2026, 11, 2)
    assert period_start(datetime(2026, 11, 1, 13), timedelta(hours=2)) == datetime(2026, 11, 1, 12)


def _served_in_turn():
    """2 GPUs; p and q 50/50, each submitting two 2-GPU 1-h jobs at 00:00; p runs hours 0-1, q 2-3."""
    spans = (("p", (0, 1)), ("q", (2, 3)))
    jb = jobs([{"job_id": f"{x}{h}", "project": x, "gpus": 2, "submit": at(0), "start": at(h), "end": at(h + 1)}
               for x, hours in spans for h in hours])
    al = allocations([(f"{x}{h}", g, at(h), at(h + 1)) for x, hours in spans for h in hours for g in (1, 2)])
    return gpus([{"gpu_id": 1}, {"gpu_id": 2}]), org([("root", None, 1), ("p", "root", 1), ("q", "root", 1)]), jb, al


def test_a_team_starved_for_a_period_has_its_hours_carried_into_the_next():
    # analytics.fairshare's own example (test_fairshare.py): p and q, 50/50 of 2 GPUs, both
    # wanting 2 GPUs; p served hours 0-1, q hours 2-3; periods of 2 h (2026-11-01 00:00 is a whole
    # number of 2-h periods from the anchor).
    inv, tree, jb, al = _served_in_turn()
    # at 04:00 the running period is the one just ended (02:00-04:00): two periods back to 00:00
    out = delivery_balance(jb, al, inv, tree, as_of=at(4), period=timedelta(hours=2), history_periods=2).collect()
    rows = {(r["node"], r["period_start"]): r for r in out.to_dicts()}
    assert sorted({ps for _, ps in rows}) == [at(0), at(2)]
    # q, hours 0-1: entitled 1 GPU-h per hour, wanting 4 then 2 -> owed 2, allocated 0 -> 2 carried.
    q0, q1 = rows[("q", at(0))], rows[("q", at(2))]
    assert (q0["gpu_hours_owed"], q0["gpu_hours_delivered"], q0["gpu_hours_balance"]) == (2, 0, 2)
    # q, hours 2-3: owed 2, due 2 + 2 = 4, allocated 4 -> delivered 4, 2 repaid, balance 0.
    assert (q1["gpu_hours_carried_in"], q1["gpu_hours_due"], q1["gpu_hours_delivered"],
            q1["gpu_hours_repaid"], q1["gpu_hours_balance"]) == (2, 4, 4, 2, 0)
    # p, hours 0-1: owed 2, allocated 4 -> 2 above due; hours 2-3: nothing wanted, nothing owed.
    p0 = rows[("p", at(0))]
    assert (p0["gpu_hours_delivered"], p0["gpu_hours_above_due"], p0["gpu_hours_balance"]) == (2, 2, 0)
    # the root sums its projects: 2 carried after the first period, none after the second
    assert [rows[("root", ps)]["gpu_hours_balance"] for ps in (at(0), at(2))] == [2, 0]
    assert rows[("root", at(2))]["period_end"] == at(4)
    # credit for fair share at 03:00 (mid second period): q's 2 carried, hour 2 owed 1 and gave 2
    # -> 1 repaid, 1 still open
    mid = delivery_balance(jb, al, inv, tree, as_of=at(3), period=timedelta(hours=2), history_periods=2).collect()
    assert credits(mid, ["p", "q"]) == {"p": 0, "q": 1}
    # asked at a period's very start with one period of history: the period just ended, not nothing
    # (and not an error)
    edge = delivery_balance(jb, al, inv, tree, as_of=at(4), period=timedelta(hours=2), history_periods=1).collect()
    assert sorted(set(edge["period_start"])) == [at(2)]
    # the history starts at 02:00 with nothing carried: q owed 2, got 4 -> balance 0, 2 above due
    q = edge.filter(edge["node"] == "q").row(0, named=True)
    assert (q["gpu_hours_carried_in"], q["gpu_hours_balance"], q["gpu_hours_above_due"]) == (0, 0, 2)


def test_fair_share_credited_with_the_open_balance_serves_the_starved_team_first():
    # The same cluster at 03:00 with a 2-h window (= the settlement period): window usage
    # [01:00, 03:00) is p 2 GPU-h (hour 1) and q 2 GPU-h (hour 2): equal shares, equal usage, a tie.
    # q still has 1 GPU-h of its carried balance open (above), so credited q = 2 - 1 = 1 and q
    # ranks first; p, owed nothing, keeps 2.
    inv, tree, jb, al = _served_in_turn()
    window = timedelta(hours=2)
    policy = Policy.model_validate({"usage": {"mode": "window", "window_days": 2 / 24,
                                              "delivery_balance": {"credit_fair_share": True, "history_periods": 2}}})
    usage = node_usage(al, inv, jb, tree, as_of=at(3), window=window)
    plain = {r["node"]: r for r in fair_share(tree, usage, usage_col="gpu_hours_window").collect().to_dicts()}
    assert plain["p"]["usage_raw_gpu_hours"] == plain["q"]["usage_raw_gpu_hours"] == 2
    assert plain["p"]["fs_rank"] == plain["q"]["fs_rank"]  # tied
    t = SimpleNamespace(jobs=jb, job_allocations=al, gpus=inv, org_nodes=tree)
    credited = credited_node_usage(t, usage, "gpu_hours_window", as_of=at(3), window=window, policy=policy)
    rows = {r["node"]: r for r in fair_share(tree, credited, usage_col="gpu_hours_window").collect().to_dicts()}
    assert (rows["p"]["usage_raw_gpu_hours"], rows["q"]["usage_raw_gpu_hours"]) == (2, 1)
    assert (rows["q"]["fs_rank"], rows["p"]["fs_rank"]) == (1, 2)
