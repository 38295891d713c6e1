"""A lead's own queue and an owner's keep, as enforcement decides them (pure: enforce.team,
enforce.keeps, enforce.policy with Situation.team_choices / owner_choices).

Golden values by hand, as in test_policy.py: N = 3 ranked projects, a job of the project ranked r
gets base + (3 − r + 1) × 1000 + its place among its project's distinct declared priorities;
base 500,000 funded, 100,000 unfunded."""

from __future__ import annotations

from datetime import timedelta

from gpuledger.enforce import keeps
from gpuledger.enforce.keeps import OwnerChoice
from gpuledger.enforce.model import JobHistory
from gpuledger.enforce.policy import decide
from gpuledger.enforce.team import TeamChoice, fund_check, reorder

from gpuledger.config import EnforcementPolicy, OwnerSelfService
from tests.enforce.test_policy import NOW, job, situation, squat

H = timedelta(hours=1)
LEAD = "vision-lead@example.com"


def chose(position=None, *, node="vision", **kw) -> TeamChoice:
    return TeamChoice(node=node, set_by=LEAD, set_at=NOW - H, position=position, **kw)


def prio(actions) -> dict[str, int]:
    return {a.job_id: a.priority for a in actions if a.action == "set-priority"}


def test_reorder_swaps_the_teams_values_within_a_band_only():
    values = {("c", "a"): 503_002, ("c", "b"): 501_000, ("c", "u"): 103_000, ("c", "x"): 502_000}
    choices = {("c", "b"): chose(1), ("c", "a"): chose(2), ("c", "u"): chose(3)}
    got = reorder(values, {("c", "a"), ("c", "b"), ("c", "u"), ("c", "x")}, choices)
    # funded band: the team's values {503002, 501000}; b is #1 -> 503002, a #2 -> 501000. u is
    # alone in the unfunded band: keeps 103000. x is another team's: not touched
    assert {k: v for k, (v, _) in got.items()} == {("c", "b"): 503_002, ("c", "a"): 501_000, ("c", "u"): 103_000}
    assert "#1 of the team's 2" in got[("c", "b")][1]


def test_a_running_job_keeps_its_value_whatever_its_place():
    values = {("c", "a"): 503_000, ("c", "b"): 501_000}
    got = reorder(values, {("c", "b")}, {("c", "a"): chose(2), ("c", "b"): chose(1)})
    assert {k: v for k, (v, _) in got.items()} == {("c", "b"): 501_000}  # alone among the queued


def test_the_leads_order_moves_no_other_teams_job():
    # vision: projects p1 (rank 1) and p3 (rank 3); llm: p2 (rank 2). All funded and queued.
    jobs = [job("v1", "p1", running=False, funded=True), job("v3", "p3", running=False, funded=True),
            job("l2", "p2", running=False, funded=True)]
    before = prio(decide(situation(jobs), EnforcementPolicy()))
    # v1: 500000 + 3000; l2: 500000 + 2000; v3: 500000 + 1000
    assert before == {"v1": 503_000, "l2": 502_000, "v3": 501_000}
    lead = {("c", "v3"): chose(1), ("c", "v1"): chose(2)}
    after = decide(situation(jobs, team_choices=lead), EnforcementPolicy())
    # v3 takes v1's 503000, v1 takes 501000; l2 keeps 502000: one vision job above it, one below,
    # as before
    assert prio(after) == {"v3": 503_000, "l2": 502_000, "v1": 501_000}
    assert {a.rule for a in after if a.action == "set-priority" and a.job_id in ("v1", "v3")} == {"team-order"}
    assert "team vision's lead" in next(a.reason for a in after if a.job_id == "v3" and a.action == "set-priority")


def test_two_jobs_of_one_project_take_places_in_the_leads_order():
    # both funded, project p1 ranked 1 of 3, no declared priority: 500000 + 3000 each, a tie
    jobs = [job("a", "p1", running=False, funded=True), job("b", "p1", running=False, funded=True),
            job("run", "p1", funded=True), job("l2", "p2", running=False, funded=True)]
    assert prio(decide(situation(jobs), EnforcementPolicy())) == {"a": 503_000, "b": 503_000, "run": 503_000,
                                                                  "l2": 502_000}
    lead = {("c", "b"): chose(1), ("c", "a"): chose(2)}
    # the project's other job (running) keeps place 0, so the ordered ones take places 1 and 2:
    # b first -> 503002, a -> 503001; l2 (another team, another project) stays at 502000
    got = prio(decide(situation(jobs, team_choices=lead), EnforcementPolicy()))
    assert got == {"b": 503_002, "a": 503_001, "run": 503_000, "l2": 502_000}


def test_an_unfunded_job_placed_first_stays_below_funded_work():
    jobs = [job("f", "p1", running=False, funded=True), job("u", "p1", running=False)]
    got = prio(decide(situation(jobs, team_choices={("c", "u"): chose(1), ("c", "f"): chose(2)}),
                      EnforcementPolicy()))
    # u takes the project's higher place (1) as the lead's first, f place 0: but 103001 < 503000,
    # bands are not crossed by an order, only by funding
    assert got == {"f": 503_000, "u": 103_001}


def test_a_hold_is_planned_once_then_a_release():
    jobs = [job("q", "p1", running=False, funded=True)]
    held = {("c", "q"): chose(held=True)}
    first = decide(situation(jobs, team_choices=held), EnforcementPolicy())
    assert [a.action for a in first if a.job_id == "q"] == ["set-priority", "hold", "none"]
    assert "held by its team lead: nothing is preempted for it" in first[-1].reason
    applied = {("c", "q"): JobHistory(applied_priority=503_000, held=True)}
    again = decide(situation(jobs, team_choices=held, history=applied), EnforcementPolicy())
    assert [a.action for a in again if a.job_id == "q"] == ["none"]
    released = decide(situation(jobs, team_choices={("c", "q"): chose(held=False)}, history=applied),
                      EnforcementPolicy())
    # (until the release is applied the scheduler still holds it: nothing is preempted for it yet)
    assert [a.action for a in released if a.job_id == "q"] == ["release", "none"]


def test_a_held_funded_job_gets_nothing_preempted_for_it():
    jobs = [job("q", "p1", running=False, funded=True, gpus=8), job("burst", "p2", gpus=8)]
    plain = decide(situation(jobs), EnforcementPolicy())
    assert [a.job_id for a in plain if a.action == "preempt"] == ["burst"]  # the demand preemption exists ...
    held = decide(situation(jobs, team_choices={("c", "q"): chose(held=True)}), EnforcementPolicy())
    assert [a.job_id for a in held if a.action == "preempt"] == []  # ... and goes with the hold


def test_fund_check_within_the_budget_left():
    # 2 GPUs x 3 h x weight 1.5 = 9 normalised GPU-hours; 20 left, 12 committed: 8 free < 9
    why = fund_check(job="c/q", asked=9.0, remaining=20.0, committed=12.0, budget_node="vision", hours=3, cap_hours=8)
    assert why is not None and "8.00 free" in why and "9.00 normalised GPU-hours" in why
    assert fund_check(job="c/q", asked=9.0, remaining=20.0, committed=11.0, budget_node="vision", hours=3,
                      cap_hours=8) is None  # 9 free: fits exactly
    assert "at most 8 h" in fund_check(job="c/q", asked=1, remaining=20, committed=0, budget_node="v", hours=9,
                                       cap_hours=8)
    assert "no budget" in fund_check(job="c/q", asked=1, remaining=None, committed=0, budget_node=None, hours=1,
                                     cap_hours=8)


# --- an owner's keep ----------------------------------------------------------------------------------
def test_a_kept_squatter_is_neither_warned_nor_preempted_until_the_keep_ends():
    jobs = [job("sq", "p2")]
    findings = [squat("sq", 150, "preempt-eligible")]
    kept = {("c", "sq"): OwnerChoice("keep", "alice", NOW - H, kept_until=NOW + H, hours=2)}
    during = decide(situation(jobs, findings=findings, owner_choices=kept), EnforcementPolicy())
    assert [a.action for a in during if a.job_id == "sq"] == ["set-priority", "none"]
    assert "keeps it until 2026-11-07 13:00Z" in next(a.reason for a in during if a.action == "none")
    # two hours after the keep was asked it has ended: the squatter is warned first again (no
    # delivered warning is on record here)
    over = {("c", "sq"): OwnerChoice("keep", "alice", NOW - 3 * H, kept_until=NOW - H, hours=2)}
    after = decide(situation(jobs, findings=findings, owner_choices=over), EnforcementPolicy())
    assert "warn" in [a.action for a in after if a.job_id == "sq"]


def test_a_kept_job_is_no_demand_victim():
    jobs = [job("w", "p1", running=False, funded=True, gpus=8), job("burst", "p2", gpus=8)]
    kept = {("c", "burst"): OwnerChoice("keep", "bob", NOW - H, kept_until=NOW + H, hours=2)}
    got = decide(situation(jobs, owner_choices=kept), EnforcementPolicy())
    assert [a for a in got if a.action == "preempt"] == []


def test_an_owner_release_stops_the_job_through_the_rails():
    jobs = [job("r", "p2", labels={"gpuledger.io/checkpointing": "true"})]
    asked = {("c", "r"): OwnerChoice("release", "carol", NOW - H)}
    got = [a for a in decide(situation(jobs, owner_choices=asked), EnforcementPolicy()) if a.action == "preempt"]
    assert [(a.job_id, a.mode, a.rule) for a in got] == [("r", "stop", "owner-release")]  # stop, though it checkpoints
    unobserved = [job("r", "p2", observed=None)]
    none = decide(situation(unobserved, owner_choices=asked), EnforcementPolicy())
    assert [a for a in none if a.action == "preempt"] == []  # no live view, no preemption


def test_keep_refusals_bound_the_keep():
    policy = OwnerSelfService(allowance_hours_per_week=3)
    def refuse(hours, granted=(), active=None):
        return keeps.keep_refusal(job="c/j", hours=hours, now=NOW, policy=policy, team="vision", allowance=3,
                                  granted=list(granted), active_until=active)
    assert refuse(2) is None
    assert "1 to 4 h" in refuse(5) and "1 to 4 h" in refuse(0.5)
    # 2 h granted this week for c/a; 2 more asked: 4 > 3 -> refused, 1 h left
    why = refuse(2, [("c/a", 2.0, NOW - 24 * H)])
    assert "3 h of kept sessions per rolling 7 days; 2 h are used (c/a), 1 h left" in why
    assert refuse(2, [("c/a", 2.0, NOW - 8 * 24 * H)]) is None  # a keep of last week no longer counts
    assert "already kept until" in refuse(1, active=NOW + H)


def test_a_keep_counts_against_the_nearest_team_with_an_allowance():
    parent = {"acme": None, "vision": "acme", "vision-gen": "vision", "vision-eval": "vision", "llm": "acme",
              "llm-pre": "llm"}
    per_team = {"vision": 8.0}
    assert keeps.allowance_node("vision-gen", parent, per_team) == "vision"  # the program's 8 h, shared
    assert keeps.allowance_node("vision-eval", parent, per_team) == "vision"
    assert keeps.allowance_node("llm-pre", parent, per_team) is None  # the default, per project
    assert keeps.allowance_node("vision-gen", parent, {"vision": 8.0, "vision-gen": 2.0}) == "vision-gen"


def test_the_kill_switch_stops_a_leads_order_and_hold_too():
    jobs = [job("a", "p1", running=False, funded=True), job("b", "p1", running=False, funded=True)]
    lead = {("c", "b"): chose(1), ("c", "a"): chose(2, held=True)}
    got = decide(situation(jobs, team_choices=lead), EnforcementPolicy(kill_switch=True))
    assert {a.action for a in got} == {"none"} and all("kill switch" in a.reason for a in got)
