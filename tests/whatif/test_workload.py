"""What the what-if's month rests on (issues 13, 34): the simulator's jobs declare the minimum
runtime design.md's funding needs, and the trace draws a never-started job's work from its class,
the same whatever the config under test says."""

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
    jobs = build_cluster(seed=7, gpus=16, start=START, days=2.0).workload.jobs
    ran = jobs.filter(pl.col("start_s").is_not_null() & pl.col("end_s").is_not_null()
                      & (pl.col("state") == "COMPLETED"))
    squat = pl.col("name").str.starts_with("squat-")
    # batch evals and notebook sessions cannot checkpoint: they declare all of their runtime
    whole = ran.filter(pl.col("kind").is_in(["batch", "interactive"]) & ~squat)
    assert whole.height > 10
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


def _warehouse(db):
    at = lambda h: START + timedelta(hours=h)
    rows = [
        # (job_id, project, kind, min_runtime_s, submit, start, end)
        ("ran", "a", "batch", 7200, at(0), at(0), at(2)),        # ran 2 h, declaring 2 h: the one batch donor
        ("eval", "b", "batch", 1800, at(0), None, None),         # never started, declares 30 min
        ("ft", "b", "fine-tune", 1800, at(0), None, None),       # never started; no fine-tune ran
        ("nb", "b", "interactive", 0, at(0), None, None),        # never started, declares nothing
        ("svc", "b", "inference", 28800, at(0), None, None),     # never started, exempt from preemption
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


def _with_exempt(cfg: Config, kinds: list[str]) -> Config:
    enf = cfg.policy.enforcement.model_copy(update={"exempt_kinds": kinds})
    return cfg.model_copy(update={"policy": cfg.policy.model_copy(update={"enforcement": enf})})


def test_a_trace_is_the_same_whatever_exempt_kinds_says_and_replays_by_hand(tmp_path):
    db = tmp_path / "w.duckdb"
    _warehouse(db)
    inv_file = tmp_path / "inv.yaml"
    # the service runs on a cluster of its own, so the one GPU of `c` is the others' alone
    inv_file.write_text("gpus:\n  - {cluster: c, model: H100, count: 1}\n  - {cluster: d, model: H100, count: 1}\n")
    cfg = _config()
    end = START + timedelta(hours=9)
    traces = []
    for kinds in ([], ["inference"], ["batch", "interactive", "fine-tune", "inference"]):
        with warehouse.open_reader(db) as con:
            traces.append(load_trace(con, _with_exempt(cfg, kinds), start=START, end=end, params=Params(),
                                     inventory=inventory_from_file(inv_file), seed=5))
    assert traces[0].jobs == traces[1].jobs == traces[2].jobs  # every field of every job, the draws included
    trace = traces[1]
    work = {j.job_id: j.work_s for j in trace.jobs}
    # ran: its recorded 7,200 s. eval draws the one batch donor (ran: 7,200 s run, 7,200 s declared):
    # 1,800 x 7,200 / 7,200 = 1,800 s. No fine-tune, notebook or service ran: their declared minimum
    # (ft 1,800 s, svc 28,800 s), nb declares none: 1 h.
    assert work == {"ran": 7200, "eval": 1800, "ft": 1800, "nb": 3600, "svc": 28800}
    assert {j.job_id: j.work_source for j in trace.jobs} == {
        "ran": "recorded", "eval": "drawn:ran", "ft": "declared", "nb": "default", "svc": "declared"}
    # Replayed under fair share (inference exempt). At 0 the submissions come in id order: eval fits
    # the free GPU of c and starts (0-1,800 s); svc starts on d (0-28,800 s). At 1,800 b has usage
    # (eval, svc) and a none: ran first, 1,800-9,000 (protected its whole 2 h). Then b's funded ft
    # 9,000-10,800. The session nb (a notebook) is not placed by 300 s: its user gives up then
    # (gpuledger.rules.job_class.SESSION_PATIENCE_S) and it never runs. No preemption.
    r = simulate(trace, _with_exempt(cfg, ["inference"]), FAIR_SHARE)
    got = {o.job.job_id: (o.first_start_s, o.done_s, o.preemptions) for o in r.outcomes}
    assert got == {"eval": (0, 1800, 0), "ran": (1800, 9000, 0), "ft": (9000, 10800, 0),
                   "nb": (None, None, 0), "svc": (0, 28800, 0)}
    assert {o.job.job_id: o.given_up_s for o in r.outcomes}["nb"] == 300
