"""Issue 34's outcome figures and the slot-limit baseline, on hand-built traces whose numbers are
derived by hand in the comments (times in seconds from the origin, GPU-hours whole GPUs × hours)."""

from __future__ import annotations

from datetime import datetime, timedelta

import polars as pl
import pytest

from gpuledger.whatif import metrics, outcome
from gpuledger.whatif.engine import simulate, slot_caps
from gpuledger.whatif.inventory import Inventory
from gpuledger.whatif.model import PRIORITY, RECLAIM, SLOT_LIMITS, JobOutcome, Params, Segment, Trace
from tests.whatif.test_whatif import B200, ORIGIN, H, _squatter_trace, config, job, summary

# --- two teams, four GPUs, caps at their share ------------------------------------------------------
# Shares a:1, b:1 -> each team may hold 0.5 x 4 = 2 GPUs under slot limits. Submitted: a1, a2, a3
# (a, 1 GPU, 1 h, batch: not sessions, whose users give up after 300 s) and b1 (b, 1 GPU, 2 h,
# batch) at 0; big (a, 3 GPUs, 1 h, training) at 60 s. Horizon 4 h; the whole run is one settlement period.
#
# Slot limits: at 0 a1, a2 start (a holds 2: its cap), a3 waits on the cap, b1 starts; one GPU idles.
# At 3,600 a1 ends (a holds 1): a3 fits the cap (1 + 1 = 2) and starts; a2 ends: big needs 3 on top
# of a3's 1 > 2 and waits. At 7,200 a3 and b1 end, a holds nothing: big (larger than the whole cap)
# starts alone, 7,200-10,800.
# Priority (all jobs the same declared priority: submission order): a1, a2, a3, b1 at 0 (4 GPUs);
# big at 3,600 when a1-a3 end, to 7,200.
#
# Owed per hour: entitled 0.5 x 4 = 2 GPU-h per team, capped at demand (requested GPUs from
# submission to end). Slot limits: a's demand h0 = 1+1+1 + 3 x 3,540/3,600 = 5.95, h1 = a3 + big
# = 4, h2 = big 3 -> owed 2+2+2 = 6, allocated 1+1+1+3 = 6 -> delivered 6, ratio 1; b: demand 1,
# 1 -> owed 2, allocated 2. Burst (allocated above owed) 0. Priority: a's demand h0 5.95, h1 big 3
# -> owed 4, allocated 6 -> delivered 4 (ratio 1), 2 GPU-h above owed; b as before. Burst = 2 / 8.
# Occupancy: 8 GPU-h of 16 either way.


def _two_teams() -> tuple[Trace, object]:
    inv = Inventory.from_counts([{"model": "H100", "count": 4}])
    jobs = (
        job("a1", "a", 0, H, gpus=1, kind="batch"),
        job("a2", "a", 0, H, gpus=1, kind="batch"),
        job("a3", "a", 0, H, gpus=1, kind="batch"),
        job("b1", "b", 0, 2 * H, gpus=1, kind="batch"),
        job("big", "a", 60, H, gpus=3, kind="training"),
    )
    return Trace(ORIGIN, 4 * H, jobs, inv), config({"a": 1, "b": 1}, {"a": 1000, "b": 1000})


def _starts(result) -> dict[str, tuple[int | None, int | None]]:
    return {o.job.job_id: (o.first_start_s, o.done_s) for o in result.outcomes}


def test_slot_caps_are_the_share_of_the_physical_gpus():
    _, cfg = _two_teams()
    assert slot_caps(cfg.org_frame(), 4) == {"a": 2.0, "b": 2.0}


def test_slot_limits_hold_each_team_to_its_share():
    trace, cfg = _two_teams()
    slot = simulate(trace, cfg, SLOT_LIMITS)
    assert _starts(slot) == {"a1": (0, H), "a2": (0, H), "a3": (H, 2 * H), "b1": (0, 2 * H),
                             "big": (2 * H, 3 * H)}
    prio = simulate(trace, cfg, PRIORITY)
    assert _starts(prio) == {"a1": (0, H), "a2": (0, H), "a3": (0, H), "b1": (0, 2 * H), "big": (H, 2 * H)}


def test_room_under_a_cap_starts_the_teams_work_in_another_pool():
    # 2 H100 + 2 B200, shares a:1, b:1 -> caps of 2 GPUs. Both of a's jobs come at 0, in id order:
    # the 1-GPU B200 job `b` starts (a holds 1); the 2-GPU H100 job `h` would take a to 3 > 2 and
    # waits, though the H100s idle. When `b` ends at 3,600 (an event of the B200 pool) a holds
    # nothing: `h` starts then in the H100 pool.
    inv = Inventory.from_counts([{"model": "H100", "count": 2}, {"model": "B200", "count": 2}])
    jobs = (job("h", "a", 0, H, gpus=2), job("b", "a", 0, H, gpus=1, pool=B200))
    _, cfg = _two_teams()
    r = simulate(Trace(ORIGIN, 4 * H, jobs, inv), cfg, SLOT_LIMITS)
    assert _starts(r) == {"b": (0, H), "h": (H, 2 * H)}


def test_the_outcome_figures_of_both_baselines():
    trace, cfg = _two_teams()
    s_slot, d_slot = summary(simulate(trace, cfg, SLOT_LIMITS), cfg)
    s_prio, d_prio = summary(simulate(trace, cfg, PRIORITY), cfg)
    owed = lambda d: dict(zip(d["project"], d["gpu_hours_owed"], strict=True))
    assert owed(d_slot) == pytest.approx({"a": 6.0, "b": 2.0})
    assert owed(d_prio) == pytest.approx({"a": 4.0, "b": 2.0})
    for s in (s_slot, s_prio):
        assert (s["delivery_ratio"], s["worst_delivery_ratio"]) == pytest.approx((1.0, 1.0))
        assert (s["teams_at_95"], s["teams_owed"]) == (2, 2)
        assert s["occupancy_ratio"] == pytest.approx(0.5)
    assert s_slot["burst_ratio"] == pytest.approx(0.0)
    assert s_prio["burst_ratio"] == pytest.approx(2 / 8)
    # batch waits (a1-a3, 1 GPU of 1 h: over the debug class's 30 min; b1): slot limits 0, 0, 0, 3,600 s
    # (a3) -> p50 0, p90 at 0.9 x 3 = 2.7 between the 3rd and 4th: 0 + 0.7 x 3,600 = 2,520 s;
    # priority all 0. Training (big): 7,140 s / 3,540 s.
    assert (s_slot["wait_p50_seconds_batch"], s_slot["wait_p90_seconds_batch"]) == pytest.approx((0.0, 2520.0))
    assert (s_prio["wait_p50_seconds_batch"], s_prio["wait_p90_seconds_batch"]) == pytest.approx((0.0, 0.0))
    assert (s_slot["wait_p90_seconds_training"], s_prio["wait_p90_seconds_training"]) == (7140.0, 3540.0)
    assert (s_slot["jobs_interactive"], s_slot["jobs_batch"], s_slot["jobs_debug"]) == (0, 4, 0)
    assert s_slot["wait_p90_seconds_inference"] is None
    # one settlement period: capacity 16, owed 8 (slot) / 6 (priority), occupied 8 -> ceiling 1
    (period,) = s_prio["settlement"]
    assert period == pytest.approx({"period_start": "2026-11-02", "capacity_gpu_hours": 16.0,
                                    "owed_gpu_hours": 6.0, "allocated_gpu_hours": 8.0,
                                    "delivered_gpu_hours": 6.0})
    assert s_prio["ceiling_delivery_ratio"] == pytest.approx(1.0)


def test_a_debug_job_is_short_small_work_whatever_its_kind():
    # <= 1 GPU and <= 30 min of work: debug, unless it is a session or a service
    assert metrics.wait_class(job("d", "a", 0, 1800, gpus=1, kind="batch")) == "debug"
    assert metrics.wait_class(job("d", "a", 0, 1801, gpus=1, kind="batch")) == "batch"
    assert metrics.wait_class(job("d", "a", 0, 600, gpus=2, kind="batch")) == "batch"
    assert metrics.wait_class(job("d", "a", 0, 600, gpus=1, kind=None)) == "debug"
    assert metrics.wait_class(job("d", "a", 0, 600, gpus=1, kind="interactive")) == "interactive"
    assert metrics.wait_class(job("d", "a", 0, 600, gpus=1, kind="inference")) == "inference"
    assert metrics.wait_class(job("d", "a", 0, 7200, gpus=8, kind="debug")) == "debug"
    assert metrics.wait_class(job("d", "a", 0, 7200, gpus=8, kind="fine-tune")) == "training"


def test_reclaimed_squatter_hours_are_the_rest_of_its_run():
    # the squatter trace (tests/whatif/test_whatif.py): the 4-GPU notebook (10 h of work) is reclaimed
    # at 9,000 s under policy 3: 36,000 - 9,000 s were still to come, 4 x 27,000 / 3,600 = 30 GPU-h.
    trace, cfg = _squatter_trace()
    s, _ = summary(simulate(trace, cfg, RECLAIM), cfg)
    assert s["reclaimed_gpu_hours"] == pytest.approx(30.0)
    s1, _ = summary(simulate(trace, cfg, PRIORITY), cfg)
    assert s1["reclaimed_gpu_hours"] == 0.0


def test_the_ceiling_is_owed_against_occupied_capacity_per_period():
    # two 2-hour periods of 10 GPU-h capacity. Period 0: owed 8, occupied 6 -> at most 6 delivered;
    # period 1: owed 4, occupied 9 -> 4. Ceiling (6 + 4) / (8 + 4) = 10 / 12.
    start = datetime(2026, 11, 2)
    rows = []
    for h, (owed, alloc) in enumerate([(4, 3), (4, 3), (2, 5), (2, 4)]):
        rows.append({"project": "p", "hour": start + timedelta(hours=h), "gpu_hours_entitled": 5.0,
                     "gpu_hours_owed": float(owed), "gpu_hours_allocated": float(alloc)})
    periods = metrics.settlement_periods(pl.DataFrame(rows), start=start, end=start + timedelta(hours=4),
                                         settle=timedelta(hours=2))
    assert [(p["period_start"], p["owed_gpu_hours"], p["allocated_gpu_hours"]) for p in periods] == [
        ("2026-11-02", 8.0, 6.0), ("2026-11-02", 4.0, 9.0)]
    assert metrics.ceiling_ratio(periods) == pytest.approx(10 / 12)
    assert metrics.ceiling_ratio([]) is None


def test_the_ceiling_with_exempt_work_where_it_ran():
    # one 2-hour period. Team x runs only exempt work: owed 1 + 1 = 2, holds 2.5 + 2.5 = 5 (all exempt);
    # team y: owed 3 + 3 = 6, holds 1.5 + 1.5 = 3. Occupied 8 = owed 8, so the plain ceiling is 1.
    # With x's exempt 5 GPU-h where they ran: x is delivered min(2, 5) = 2; y can be given at most
    # the occupied hours exempt work left, 8 - 5 = 3, of its 6 -> deliverable 2 + 3 = 5 of 8 = 0.625;
    # exempt above owed 5 - 2 = 3 GPU-h.
    start = datetime(2026, 11, 2)
    rows = [{"project": p, "hour": start + timedelta(hours=h), "gpu_hours_entitled": 5.0,
             "gpu_hours_owed": owed, "gpu_hours_allocated": alloc}
            for h in (0, 1) for p, owed, alloc in (("x", 1.0, 2.5), ("y", 3.0, 1.5))]
    exempt = pl.DataFrame({"project": ["x"], "period": [0], "gpu_hours_exempt": [5.0]})
    (period,) = metrics.settlement_periods(pl.DataFrame(rows), start=start, end=start + timedelta(hours=2),
                                           settle=timedelta(hours=2), exempt=exempt)
    assert (period["owed_gpu_hours"], period["allocated_gpu_hours"], period["exempt_gpu_hours"],
            period["exempt_above_owed_gpu_hours"], period["deliverable_gpu_hours"]) == pytest.approx(
        (8.0, 8.0, 5.0, 3.0, 5.0))
    assert metrics.ceiling_ratio([period]) == pytest.approx(1.0)
    assert metrics.ceiling_ratio([period], exempt_where_it_ran=True) == pytest.approx(5 / 8)
    # without the split there is no such ceiling (None), not a made-up one
    (plain,) = metrics.settlement_periods(pl.DataFrame(rows), start=start, end=start + timedelta(hours=2),
                                          settle=timedelta(hours=2))
    assert metrics.ceiling_ratio([plain], exempt_where_it_ran=True) is None


def test_exempt_hours_are_split_at_the_settlement_edges():
    # periods of 2 h (7,200 s). An exempt 2-GPU service held GPUs [3,000, 9,000) s: 4,200 s in period 0
    # (2 x 4,200 / 3,600 = 2.333 GPU-h) and 1,800 s in period 1 (1.0 GPU-h); a batch job is not counted.
    svc = job("svc", "x", 0, 6000, gpus=2, kind="inference")
    other = job("b", "y", 0, 6000, gpus=1, kind="batch")
    seg = lambda start, end: Segment(start, end, (0,), 0.0, float(end - start), "done")
    outcomes = [JobOutcome(svc, [seg(3000, 9000)]), JobOutcome(other, [seg(0, 6000)])]
    got = metrics.exempt_gpu_hours(outcomes, lambda j: j.kind == "inference", settle=timedelta(hours=2),
                                   horizon_s=4 * 3600)
    assert [(p, k) for p, k, _ in sorted(got.iter_rows())] == [("x", 0), ("x", 1)]
    assert sorted(got["gpu_hours_exempt"].to_list(), reverse=True) == pytest.approx([7 / 3, 1.0])
    assert metrics.exempt_gpu_hours(outcomes, None, settle=timedelta(hours=2), horizon_s=4 * 3600) is None


def test_figures_over_seeds_are_min_median_max():
    # three seeds' figures: delivery 0.9, 1.0, 0.95 -> min 0.9, median 0.95, max 1.0
    runs = {1: {PRIORITY: {"delivery_ratio": 0.9}}, 2: {PRIORITY: {"delivery_ratio": 1.0}},
            3: {PRIORITY: {"delivery_ratio": 0.95}}}
    got = outcome.spread(runs, "delivery_ratio", PRIORITY)
    assert got == pytest.approx({"min": 0.9, "median": 0.95, "max": 1.0})
    # a figure some seed lacks (no debug job there): over the seeds that have it
    runs[2][PRIORITY]["delivery_ratio"] = None
    assert outcome.spread(runs, "delivery_ratio", PRIORITY) == pytest.approx(
        {"min": 0.9, "median": 0.925, "max": 0.95})
    # cells: median [min–max] in the figure's unit; a wait as people say it
    assert outcome.cell({"min": 0.9, "median": 0.925, "max": 0.95}, "ratio") == "0.925 [0.900–0.950]"
    assert outcome.cell({"min": 30, "median": 600, "max": 9000}, "seconds") == "10 min [30 s–2.5 h]"
    assert outcome.cell({"min": 5399, "median": 5400, "max": 5400}, "seconds") == "1.5 h [90 min–1.5 h]"
    assert outcome.cell({"min": 3, "median": 3, "max": 3}, "count") == "3"
    assert outcome.cell({"min": 2, "median": 2.5, "max": 3}, "count") == "2.5 [2.0–3.0]"
    assert outcome.cell(None, "ratio") == "-"


# --- the command over seeds -----------------------------------------------------------------------
def test_the_outcome_names_the_quick_lane_it_was_replayed_with(example_config):
    # the example config's lane: no reserve, at most 4 lane jobs per project (QuickLane's defaults);
    # --lane-reserve 0.05 alone reserves 0.05 of every pool; reserve_share_whole 0.003 beside it splits
    # the wording; without policy 4 nothing is said
    from gpuledger.cli.whatif import _lane_said
    from gpuledger.whatif.model import Params

    lane = example_config.policy.enforcement.quick_lane
    assert _lane_said(example_config, Params(), ["priority", "quick-lane"]) == \
        "; quick lane: no reserve, at most 4 lane jobs per project"
    assert _lane_said(example_config, Params(lane_reserve_share=0.05), ["quick-lane"]) == \
        "; quick lane: reserve 0.05 of each pool, at most 4 lane jobs per project"
    split = lane.model_copy(update={"reserve_share": 0.05, "reserve_share_whole": 0.003, "max_running_per_project": 16})
    enf = example_config.policy.enforcement.model_copy(update={"quick_lane": split})
    cfg = example_config.model_copy(update={"policy": example_config.policy.model_copy(update={"enforcement": enf})})
    assert _lane_said(cfg, Params(), ["quick-lane"]) == \
        "; quick lane: reserve 0.05 of MIG pools, 0.003 of whole-GPU pools, at most 16 lane jobs per project"
    assert _lane_said(cfg, Params(), ["priority", "fair-share"]) == ""


@pytest.mark.slow
def test_whatif_schedule_over_simulated_seeds(tmp_path):
    import json

    from typer.testing import CliRunner

    from gpuledger.cli import app

    runner = CliRunner()
    args = ["whatif", "schedule", "--simulate-gpus", "8", "--days", "1", "--seeds", "2", "--sim-dir",
            str(tmp_path / "sims"), "--format", "json", "--no-progress"]
    done = runner.invoke(app, args)
    assert done.exit_code == 0, done.output
    doc = json.loads(done.stdout)["outcome"]
    assert doc["seeds"] == [1, 2] and doc["policies"] == ["priority", "slot-limits", "fair-share", "reclaim", "quick-lane"]
    assert len(set(doc["sources"].values())) == 2  # a warehouse per seed
    rows = {r["figure"]: r for r in doc["rows"]}
    for policy in doc["policies"]:
        cell = rows["delivery_ratio"][policy]
        assert cell["min"] <= cell["median"] <= cell["max"]
        assert {p["period_start"] for p in doc["settlement"]["1"][policy]} == {"2026-11-01"}
    assert rows["preemptions"]["slot-limits"] == {"min": 0, "median": 0, "max": 0}  # baselines never preempt
    again = runner.invoke(app, args)  # the warehouses are kept: the same file again
    assert again.stdout == done.stdout
    table = runner.invoke(app, args[:-3] + ["--no-progress"])
    assert table.exit_code == 0 and "median [min–max]" in table.output and "worst team" in table.output
    # one warehouse, two seeds: the same recorded jobs, each seed its own draws for the never-started
    one = runner.invoke(app, ["whatif", "schedule", "--warehouse", doc["sources"]["1"], "--seeds", "2",
                              "--policies", "priority", "--format", "json", "--no-progress"])
    assert one.exit_code == 0, one.output
    block = json.loads(one.stdout)["outcome"]
    assert block["seeds"] == [1, 2] and set(block["sources"].values()) == {doc["sources"]["1"]}
    assert "each seed its draws" in block["regime"] and "quick lane" not in block["regime"]  # no policy 4
    assert doc["regime"].endswith("; quick lane: no reserve, at most 4 lane jobs per project")
    # the wait the rules force on a debug job is a bound below its wait, in every policy; under
    # quick-lane some debug job of seed 1 finds its pool held by exempt or protected work (so the
    # bound is checked where it is above 0)
    from pathlib import Path

    from gpuledger.cli.whatif import _load
    from gpuledger.whatif.engine import simulate

    cfg, params, trace, _, _ = _load(Path(doc["sources"]["1"]), None, None, None, None, seed=1, checkpoint=None,
                                     budgets="fit")
    for policy in doc["policies"]:
        run = simulate(trace, cfg, policy, params)
        debug = [o for o in run.outcomes if o.forced_wait_s is not None and o.job.submit_s < trace.horizon_s]
        waits = [(o.first_start_s if o.first_start_s is not None else trace.horizon_s) - o.job.submit_s for o in debug]
        assert debug and all(o.forced_wait_s <= w for o, w in zip(debug, waits, strict=True)), policy
        assert policy != "quick-lane" or any(o.forced_wait_s > 0 for o in debug)
    assert rows["wait_p90_seconds_debug_forced"]["quick-lane"]["max"] > 0
    bad = runner.invoke(app, args[:-3] + ["--sweep", "cycle_minutes=5,15"])
    assert bad.exit_code == 2 and "a sweep replays one trace" in bad.output
    bad = runner.invoke(app, ["whatif", "schedule", "--simulate-gpus", "12", "--no-progress"])
    assert bad.exit_code == 2 and "multiple of 8" in bad.output


def test_budgets_fitted_to_the_cluster_keep_their_proportions():
    # 2 H100 (weight 1) + 1 B200 (weight 1.8): 3 GPUs at the dearest weight, 1.8 = 5.4 normalised
    # GPU-h an hour (each team's share funded on any model); November has 720 h: 3,888 for the month.
    # Top budgets: grp 400 (its children a 100 and b 300 sit under it) and c 100 -> k = 3,888 / 500
    # = 7.776: grp 3,110.4 -> 3,110, a 777.6 -> 778, b 2,332.8 -> 2,333, c 777.6 -> 778.
    # A December budget of 50 is scaled by December's own capacity: 5.4 x 744 h = 4,017.6 -> 4,018.
    from gpuledger.config import Config
    from gpuledger.whatif.policies import fitted_budgets

    cfg = Config.model_validate({
        "org": {"name": "org", "children": [
            {"name": "grp", "shares": 1, "children": [{"name": "a", "shares": 1}, {"name": "b", "shares": 3}]},
            {"name": "c", "shares": 1}]},
        "budgets": [{"node": "grp", "period": "2026-11", "gpu_hours": 400},
                    {"node": "a", "period": "2026-11", "gpu_hours": 100},
                    {"node": "b", "period": "2026-11", "gpu_hours": 300},
                    {"node": "c", "period": "2026-11", "gpu_hours": 100},
                    {"node": "c", "period": "2026-12", "gpu_hours": 50}],
        "rate_card": [{"gpu_model": "H100", "tier": "reserved", "price_per_gpu_hour": "2.10",
                       "effective_from": "2026-01-01"},
                      {"gpu_model": "B200", "tier": "reserved", "price_per_gpu_hour": "4.00",
                       "effective_from": "2026-01-01", "budget_weight": 1.8}],
    })
    inv = Inventory.from_counts([{"model": "H100", "count": 2}, {"model": "B200", "count": 1}])
    got = {(b.node, b.period): b.gpu_hours for b in fitted_budgets(cfg, inv, ORIGIN).budgets}
    assert got == {("grp", "2026-11"): 3110, ("a", "2026-11"): 778, ("b", "2026-11"): 2333,
                   ("c", "2026-11"): 778, ("c", "2026-12"): 4018}
    # the config itself is left as it was
    assert [int(b.gpu_hours) for b in cfg.budgets] == [400, 100, 300, 100, 50]


def test_an_unknown_budgets_mode_is_refused():
    trace, cfg = _two_teams()
    with pytest.raises(ValueError, match="budgets 'half': choose config or fit"):
        simulate(trace, cfg, PRIORITY, Params(budgets="half"))
