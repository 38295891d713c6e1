"""What the what-if's month rests on (issue 13): the simulator's jobs declare the minimum runtime
design.md's funding needs, and the trace gives a job that never started a runtime it can finish
inside its protection when it cannot checkpoint."""

from __future__ import annotations

from datetime import datetime, timedelta

import polars as pl

from gpuledger import warehouse
from gpuledger.config import Config, parse_config_text
from gpuledger.simulator import build_cluster
from gpuledger.whatif.engine import simulate
from gpuledger.whatif.model import FAIR_SHARE, Params
from gpuledger.whatif.trace import inventory_from_file, load_trace

START = datetime(2026, 11, 1)


def test_simulated_jobs_declare_a_minimum_runtime_but_squatters():
    jobs = build_cluster(seed=7, gpus=16, start=START, days=1.0).workload.jobs
    ran = jobs.filter(pl.col("start_s").is_not_null() & pl.col("end_s").is_not_null()
                      & (pl.col("state") == "COMPLETED"))
    squat = pl.col("name").str.starts_with("squat-")
    # batch evals and notebook sessions cannot checkpoint: they declare all of their runtime
    whole = ran.filter(pl.col("kind").is_in(["batch", "interactive"]) & ~squat)
    assert whole.height > 20
    assert (whole["min_runtime_s"] == whole["end_s"] - whole["start_s"]).all()
    # fine-tunes checkpoint: at most 2 h; training and inference the 8 h cap
    ft = jobs.filter(pl.col("kind") == "fine-tune")
    assert ft.height and (ft["min_runtime_s"] <= 2 * 3600).all() and (ft["min_runtime_s"] > 0).all()
    assert (jobs.filter(pl.col("kind").is_in(["training", "inference"]))["min_runtime_s"] == 8 * 3600).all()
    # squatters (ground truth for the squatting rules) declare none: never funded, never protected
    assert (jobs.filter(squat)["min_runtime_s"] == 0).all()


def _config() -> Config:
    text = """
currency: USD
org:
  name: acme
  children:
    - {name: a, shares: 1}
    - {name: b, shares: 1}
budgets:
  - {node: a, period: 2026-11, gpu_hours: 1000}
  - {node: b, period: 2026-11, gpu_hours: 1000}
rate_card:
  - {gpu_model: H100, tier: reserved, price_per_gpu_hour: "2.00", effective_from: 2026-01-01}
"""
    return parse_config_text(text)


def test_a_never_started_job_that_cannot_checkpoint_runs_its_declared_minimum(tmp_path):
    db = tmp_path / "w.duckdb"
    at = lambda h: START + timedelta(hours=h)
    rows = [
        # (job_id, project, kind, min_runtime_s, submit, start, end)
        ("ran", "a", "batch", 7200, at(0), at(0), at(2)),        # ran 2 h: the batch median is 2 h
        ("eval", "b", "batch", 1800, at(0), None, None),         # never started, declares 30 min
        ("ft", "b", "fine-tune", 1800, at(0), None, None),       # never started, but checkpoints
        ("nb", "b", "interactive", 0, at(0), None, None),        # never started, declares nothing
        ("svc", "b", "inference", 28800, at(0), None, None),     # never started, exempt: never preempted
    ]
    with warehouse.open_writer(db) as con:
        for jid, project, kind, mr, sub, st, en in rows:
            con.execute(
                "INSERT INTO jobs (cluster, job_id, project, name, kind, gpu_model, gpus, min_runtime_s, "
                "submit_time, start_time, end_time, state, priority, source, updated_at) "
                "VALUES (?, ?, ?, ?, ?, 'H100', 1, ?, ?, ?, ?, ?, 100, 'csv', ?)",
                ["d" if kind == "inference" else "c", jid, project, jid, kind, mr, sub, st, en,
                 "COMPLETED" if en else "PENDING", at(0)],
            )
    inv_file = tmp_path / "inv.yaml"
    # the service runs on a cluster of its own, so the one GPU of `c` is the others' alone
    inv_file.write_text("gpus:\n  - {cluster: c, model: H100, count: 1}\n  - {cluster: d, model: H100, count: 1}\n")
    cfg = _config()
    with warehouse.open_reader(db) as con:
        trace = load_trace(con, cfg, start=START, end=at(8), params=Params(),
                           inventory=inventory_from_file(inv_file))
    work = {j.job_id: j.work_s for j in trace.jobs}
    # eval: its declared 1800 s, not the batch median 7200 s. ft resumes from checkpoints, nb
    # declares nothing, svc is exempt (inference, never preempted): the median of their kind, and
    # none of those kinds ran -> 1 h each.
    assert work == {"ran": 7200, "eval": 1800, "ft": 3600, "nb": 3600, "svc": 3600}
    # Replayed on the one GPU under fair share. At 0 all four wait; no usage, so the ranks tie and
    # funded work (all but nb, which declares no minimum runtime) goes in submission then id order:
    # eval 0-0.5 h. Then b has usage and a none: ran 0.5-2.5 h (protected all its 2 h). Then b's
    # funded ft 2.5-3.5 h, and the unfunded nb 3.5-4.5 h. No preemption: eval ends as its
    # protection does. With the median, eval (protected 30 min, 2 h of work) would have been
    # preemptible from 0.5 h by the better-ranked waiting `ran`, and would start over each time.
    r = simulate(trace, cfg, FAIR_SHARE)
    got = {o.job.job_id: (o.first_start_s, o.done_s, o.preemptions) for o in r.outcomes}
    assert got == {"eval": (0, 1800, 0), "ran": (1800, 9000, 0), "ft": (9000, 12600, 0),
                   "nb": (12600, 16200, 0), "svc": (0, 3600, 0)}
