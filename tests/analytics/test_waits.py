"""Wait times and their causes (gpuledger.analytics.waits): every figure derived by hand below.

One pool of 8 H100 on cluster c, the clock in minutes after 2026-12-01 00:00 UTC, ``now`` = 60:

    job  project  GPUs  submit  start  end   wait (min)   cause
    r1   a        8     0       0      10     0           none: started when submitted
    q1   a        4     5       20     —     15           fair-share: q2 (submitted at 6) started first
    q2   b        4     6       10     50     4           pool-full: r1 held all 8 until 10
    q3   b        4     30      —      —     30 so far    fair-share: q4 (submitted at 40) started first
    q4   a        1     40      50     —     10           scheduler: Slurm said Dependency at 45

GPUs held: 8 in [0, 10), 4 in [10, 20), 8 in [20, 50), 5 from 50 (q2 ends as q4 starts).
"""

from __future__ import annotations

from datetime import datetime, timedelta

import polars as pl
import pytest

from gpuledger.analytics.waits import job_waits, observed_capacity, wait_causes, wait_summary
from gpuledger.rules.job_class import wait_class, wait_class_expr

T0 = datetime(2026, 12, 1)


def t(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


NOW = t(60)
JOB_SCHEMA = {"cluster": pl.String, "job_id": pl.String, "scheduler_job": pl.String, "project": pl.String,
              "user_name": pl.String, "kind": pl.String, "gpu_model": pl.String, "gpus": pl.Float64,
              "time_limit_s": pl.Int64, "submit_time": pl.Datetime("us"), "start_time": pl.Datetime("us"),
              "end_time": pl.Datetime("us"), "state": pl.String}
SQUAT = {"cluster": pl.String, "job_id": pl.String, "gpu_model": pl.String, "gpus_idle": pl.Int64,
         "first_seen": pl.Datetime("us"), "resolved_at": pl.Datetime("us")}
UNFUNDED = {"cluster": pl.String, "job_id": pl.String, "unfunded_reason": pl.String}
REASONS = {"cluster": pl.String, "job_id": pl.String, "observed_at": pl.Datetime("us"), "scheduler": pl.String,
           "reason": pl.String, "message": pl.String}


def jobs(*rows) -> pl.DataFrame:
    out = []
    for job_id, project, gpus, submit, start, end, *rest in rows:
        kind = rest[0] if rest else "training"
        out.append({"cluster": "c", "job_id": job_id, "scheduler_job": job_id.split("@")[0], "project": project,
                    "user_name": f"u-{project}", "kind": kind, "gpu_model": "H100", "gpus": float(gpus),
                    "time_limit_s": 7200, "submit_time": t(submit), "start_time": None if start is None else t(start),
                    "end_time": None if end is None else t(end), "state": "X"})
    return pl.DataFrame(out, schema=JOB_SCHEMA, orient="row")


POOL = jobs(("r1", "a", 8, 0, 0, 10), ("q1", "a", 4, 5, 20, None), ("q2", "b", 4, 6, 10, 50),
            ("q3", "b", 4, 30, None, None), ("q4", "a", 1, 40, 50, None))


def started(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.filter(pl.col("start_time").is_not_null()).select(
        "cluster", "job_id", "gpu_model", "gpus", "submit_time", "start_time", "end_time")


def causes(frame, *, squatting=None, unfunded=None, reasons=None, capacity=None) -> dict[str, tuple[str, str]]:
    waits = job_waits(frame, now=NOW)
    out = wait_causes(waits, now=NOW, others=started(frame),
                      squatting=pl.DataFrame(squatting or [], schema=SQUAT, orient="row"),
                      unfunded=pl.DataFrame(unfunded or [], schema=UNFUNDED, orient="row"),
                      reasons=pl.DataFrame(reasons or [], schema=REASONS, orient="row"), capacity=capacity)
    return {r["job_id"]: (r["cause"], r["cause_detail"]) for r in out.iter_rows(named=True)}


def test_each_wait_is_submit_to_start_and_a_waiting_job_counts_its_wait_so_far():
    w = {r["job_id"]: r for r in job_waits(POOL, now=NOW).iter_rows(named=True)}
    assert [(j, w[j]["wait_s"], w[j]["still_waiting"]) for j in ("r1", "q1", "q2", "q3", "q4")] == [
        ("r1", 0.0, False), ("q1", 900.0, False), ("q2", 240.0, False), ("q3", 1800.0, True), ("q4", 600.0, False)]
    assert w["q3"]["start_time"] is None


def test_a_job_cancelled_in_the_queue_waited_for_nothing_and_a_future_start_is_still_a_wait():
    frame = jobs(("gone", "a", 1, 0, None, 30), ("later", "a", 1, 10, 90, None))
    w = job_waits(frame, now=NOW)
    # `gone` ended at 30 without a start: left out; `later` starts at 90, after now (60): 50 min so far
    assert w.select("job_id", "wait_s", "still_waiting").rows() == [("later", 3000.0, True)]


def test_time_to_first_gpu_spans_every_run_of_a_requeued_job():
    # job 7 ran 0 -> 30 (first run, submitted at 0, started at 10), was requeued at 30 (Slurm resets
    # Submit) and started again at 45: its runs wait 10 and 15 min; its first GPU came 10 min after
    # its first submission, so the second run's row carries 600 s too but is not its first run
    frame = jobs(("7@2026-12-01T00:10:00", "a", 2, 0, 10, 30), ("7", "a", 2, 30, 45, None))
    w = {r["job_id"]: r for r in job_waits(frame, now=NOW).iter_rows(named=True)}
    assert (w["7@2026-12-01T00:10:00"]["wait_s"], w["7"]["wait_s"]) == (600.0, 900.0)
    assert (w["7@2026-12-01T00:10:00"]["first_gpu_s"], w["7"]["first_gpu_s"]) == (600.0, 600.0)
    assert (w["7@2026-12-01T00:10:00"]["first_run"], w["7"]["first_run"]) == (True, False)
    summary = wait_summary(job_waits(frame, now=NOW), by="project").row(0, named=True)
    # waits 600 and 900: p50 = 750, p90 = 600 + 0.9 × 300 = 870; time to first GPU of one job only
    assert (summary["jobs"], summary["wait_p50_s"], summary["wait_p90_s"], summary["wait_max_s"]) == (2, 750, 870, 900)
    assert (summary["first_gpu_p50_s"], summary["first_gpu_p90_s"]) == (600, 600)


def test_percentiles_per_project_interpolate_between_order_statistics():
    summary = {r["project"]: r for r in wait_summary(job_waits(POOL, now=NOW), by="project").iter_rows(named=True)}
    # a: waits 0, 900, 600 s -> sorted 0, 600, 900: p50 = 600; p90 at position 0.9 × 2 = 1.8:
    #    600 + 0.8 × (900 - 600) = 840; max 900
    a = summary["a"]
    assert (a["jobs"], a["still_waiting"], a["wait_p50_s"], a["wait_p90_s"], a["wait_max_s"]) == (
        3, 0, 600.0, pytest.approx(840.0), 900.0)
    # b: 240 and 1800 (still waiting): p50 = 1020, p90 = 240 + 0.9 × 1560 = 1644
    b = summary["b"]
    assert (b["jobs"], b["still_waiting"], b["wait_p50_s"], b["wait_p90_s"], b["wait_max_s"]) == (
        2, 1, 1020.0, pytest.approx(1644.0), 1800.0)


def test_buckets_by_day_and_week_of_submission():
    frame = jobs(("mon", "a", 1, 0, 6, None), ("tue", "a", 1, 24 * 60, 24 * 60 + 2, None),
                 ("next-mon", "a", 1, 7 * 24 * 60, 7 * 24 * 60 + 10, None))
    w = job_waits(frame, now=t(8 * 24 * 60))
    days = wait_summary(w, by="project", every="day")
    assert days.select("bucket", "jobs", "wait_p50_s").rows() == [
        (t(0), 1, 360.0), (t(24 * 60), 1, 120.0), (t(7 * 24 * 60), 1, 600.0)]
    # 2026-12-01 is a Tuesday: its week starts Monday 2026-11-30; the 8th starts the next one
    weeks = wait_summary(w, by="project", every="week")
    assert weeks.select("bucket", "jobs", "wait_p50_s", "wait_max_s").rows() == [
        (datetime(2026, 11, 30), 2, 240.0, 360.0), (datetime(2026, 12, 7), 1, 600.0, 600.0)]


def test_causes_in_their_order_with_the_figures_behind_them():
    got = causes(POOL, reasons=[("c", "q4", t(45), "slurm", "Dependency", None),
                                ("c", "q3", t(31), "slurm", "Resources", None)])
    assert got["r1"][0] == "none"
    # q1: q2, submitted after it at 6, started at 10 before q1's 20 -> overtaken: fair share
    assert got["q1"] == ("fair-share", "1 later job(s) started first on H100: ranked above it")
    # q2: r1 held all 8 at 6 (the most seen at once: 8) and nothing later started first: full
    assert got["q2"] == ("pool-full", "every H100 busy with work that came first")
    # q3: Slurm's `Resources` is a reason gpuledger models; q4 (submitted at 40) started at 50
    assert got["q3"] == ("fair-share", "1 later job(s) started first on H100: ranked above it")
    # q4: q1 and q2 held 8 at 40 — but Slurm said Dependency: the scheduler's own cause
    assert got["q4"] == ("scheduler", "Slurm says Dependency")


def test_squatters_on_the_pool_win_over_rank_and_budget():
    # r1 was found squatting from 3 until it ended at 10: its 8 idle GPUs overlap q1's wait
    # [5, 20) for 5 min and q2's [6, 10) for 4 min
    squat = [("c", "r1", "H100", 8, t(3), t(10))]
    got = causes(POOL, squatting=squat, unfunded=[("c", "q1", "budget exhausted at a")])
    assert got["q1"] == ("squatters", "1 squatting job(s) held 8 idle H100 GPU(s) for up to 5.0 min of the wait")
    assert got["q2"] == ("squatters", "1 squatting job(s) held 8 idle H100 GPU(s) for up to 4.0 min of the wait")
    assert got["q3"][0] == "fair-share"  # its wait began after the finding was resolved
    # a finding on another model's pool does not count
    other = [("c", "r1", "B200", 8, t(3), t(10))]
    assert causes(POOL, squatting=other)["q1"][0] == "fair-share"


def test_budget_when_unfunded_for_want_of_budget_and_overtaken():
    got = causes(POOL, unfunded=[("c", "q1", "budget exhausted at a"), ("c", "q2", "no budget"),
                                 ("c", "q4", "no minimum runtime declared")])
    assert got["q1"] == ("budget", "unfunded (budget exhausted at a): 1 later job(s) started first on H100")
    # q2 was unfunded too, but nothing later overtook it: the pool was full, not its budget
    assert got["q2"][0] == "pool-full"


def test_room_in_the_pool_makes_the_wait_the_schedulers_own():
    # 16 H100 installed: q2 at 6 found r1's 8 held, and no job submitted before it started during
    # its wait -> 8 free for its 4; q1 had room too, but was overtaken (fair share comes first)
    capacity = pl.DataFrame({"cluster": ["c"], "gpu_model": ["H100"], "gpus": [16.0]})
    got = causes(POOL, capacity=capacity)
    assert got["q1"][0] == "fair-share"
    assert got["q2"] == ("scheduler", "8.0 of 16.0 H100 GPUs were free for it: the scheduler's own delay")
    assert causes(POOL)["q2"][0] == "pool-full"  # 8 seen held at most: full


def test_observed_capacity_is_the_most_held_at_once():
    # r1 8 in [0, 10), q2 4 in [10, 50), q1 4 from 20, q4 1 from 50: at 10 r1's end counts before
    # q2's start (8, not 12); 8 in [20, 50); at 50 q2's end before q4's start (5, not 9)
    assert observed_capacity(started(POOL)).rows() == [("c", "H100", 8.0)]


def test_summary_counts_causes_most_first():
    w = wait_causes(job_waits(POOL, now=NOW), now=NOW, others=started(POOL),
                    squatting=pl.DataFrame(schema=SQUAT), unfunded=pl.DataFrame(schema=UNFUNDED),
                    reasons=pl.DataFrame([("c", "q4", t(45), "slurm", "Dependency", None)], schema=REASONS,
                                         orient="row"))
    rows = {r["project"]: r for r in wait_summary(w, by="project").iter_rows(named=True)}
    # a: r1 none, q1 fair-share, q4 scheduler -> one each, by name; b: q2 pool-full, q3 fair-share
    assert rows["a"]["causes"] == "fair-share 1, none 1, scheduler 1"
    assert rows["a"]["main_cause"] == "fair-share"  # of the jobs that waited, by name among equals
    only_r1 = wait_summary(w.filter(pl.col("job_id") == "r1"), by="project").row(0, named=True)
    assert (only_r1["causes"], only_r1["main_cause"]) == ("none 1", "none")
    assert (rows["b"]["causes"], rows["b"]["main_cause"]) == ("fair-share 1, pool-full 1", "fair-share")


@pytest.mark.parametrize(("kind", "gpus", "limit", "work", "expected"), [
    ("batch", 1, 1800, 99999, "debug"),       # a 30-min limit on one GPU: debug, whatever it ran
    ("batch", 1, 1801, 60, "batch"),
    (None, 1, None, 600, "debug"),            # no limit recorded: its 10 min of work
    (None, 1, None, None, "other"),           # not started, no limit: nothing says it is short
    ("interactive", 1, 600, 600, "interactive"),
    ("fine-tune", 8, 7200, 7200, "training"),
    ("debug", 8, 7200, 7200, "debug"),
])
def test_the_class_rule_and_its_polars_form_agree(kind, gpus, limit, work, expected):
    assert wait_class(kind, gpus, limit, work) == expected
    frame = pl.DataFrame({"kind": [kind], "gpus": [float(gpus)], "time_limit_s": [limit], "work_s": [work]},
                         schema={"kind": pl.String, "gpus": pl.Float64, "time_limit_s": pl.Int64, "work_s": pl.Float64})
    assert frame.select(wait_class_expr()).item() == expected


def test_pools_are_counted_apart_and_a_wait_naming_no_model_sees_its_whole_cluster():
    # POOL on cluster c, its copy on cluster d (B200), and on c a wait naming no model ("any", 1 GPU,
    # submitted at 7, started at 55): q4 (submitted at 40, started at 50) overtook it -> fair share;
    # d's jobs never count for c's waits: d's q1 copy is overtaken by d's q2 alone. On c, "any" (it
    # started at 55, after every other wait ended but q3's) overtook nobody; its GPU is one more
    # seen held on c (capacity 8 H100 + 1 of no model = 9 for an H100 wait), so q4 at 40 — q1's 4
    # and q2's 4 held, nothing submitted by 40 started in [40, 50) — finds 1 free for its 1 GPU:
    # the scheduler's own delay, where POOL alone had it full
    d = POOL.with_columns(cluster=pl.lit("d"), gpu_model=pl.lit("B200"), job_id=pl.col("job_id") + "-d")
    anyone = jobs(("any", "a", 1, 7, 55, None)).with_columns(gpu_model=pl.lit(None, dtype=pl.String))
    got = causes(pl.concat([POOL, d, anyone]))
    assert got["any"] == ("fair-share", "1 later job(s) started first on GPU: ranked above it")
    assert got["q1-d"] == ("fair-share", "1 later job(s) started first on B200: ranked above it")
    alone = causes(POOL)
    assert {k: got[k] for k in alone} == {
        **alone, "q4": ("scheduler", "1.0 of 9.0 H100 GPUs were free for it: the scheduler's own delay")}
    assert alone["q4"] == ("pool-full", "every H100 busy with work that came first")
