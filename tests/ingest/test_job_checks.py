"""Job rows that would poison every report are quarantined with the reason, in every job source
(issue 8, item 13): times before 2000, an end in the future beyond the clock skew, absurd GPU
counts, unknown GPU models or job kinds, projects (Slurm accounts) that are not in the org tree."""

from __future__ import annotations

from datetime import datetime

import polars as pl

from gpuledger import warehouse
from gpuledger.analytics import queries
from gpuledger.config import Config
from gpuledger.ingest.jobs.checks import JobLimits, job_limits, job_problem
from gpuledger.ingest.jobs.jobs_csv import parse_jobs_csv
from gpuledger.ingest.jobs.k8s_mapping import map_pod
from gpuledger.ingest.jobs.kubernetes import write_batch as write_pods
from gpuledger.ingest.jobs.slurm import parse_parsable
from gpuledger.ingest.jobs.slurm import write_batch as write_sacct

NOW = datetime(2026, 11, 20, 12, 0)
CONFIG = Config.model_validate({
    "org": {"name": "acme", "children": [{"name": "vision"}, {"name": "nlp"}]},
    "rate_card": [{"gpu_model": "H100", "price_per_gpu_hour": "2.00", "effective_from": "2026-01-01"}],
})


def _warehouse(con, n_gpus=16):
    warehouse.replace_reference(con, CONFIG.org_frame(), CONFIG.budgets_frame(), CONFIG.rate_card_frame())
    warehouse.register_gpus(con, pl.DataFrame({
        "cluster": ["c1"] * n_gpus, "gpu_uuid": [f"GPU-{i}" for i in range(n_gpus)],
        "host": ["n1"] * n_gpus, "model": ["H100"] * n_gpus}))


CSV = """job_id,cluster,project,user,gpu_model,gpus,start_time,end_time,kind
ok,c1,vision,ada,H100,2,2026-11-19T00:00:00Z,2026-11-19T04:00:00Z,training
old,c1,vision,ada,H100,2,1970-01-01T00:00:00Z,1970-01-01T01:00:00Z,training
future,c1,vision,ada,H100,2,2026-11-19T00:00:00Z,2027-11-19T00:00:00Z,training
skewed,c1,vision,ada,H100,2,2026-11-19T00:00:00Z,2026-11-20T12:05:00Z,training
huge,c1,vision,ada,H100,1000000000,2026-11-19T00:00:00Z,2026-11-19T01:00:00Z,training
wide,c1,vision,ada,H100,17,2026-11-19T00:00:00Z,2026-11-19T01:00:00Z,training
model,c1,vision,ada,Q9000,1,2026-11-19T00:00:00Z,2026-11-19T01:00:00Z,training
kind,c1,vision,ada,H100,1,2026-11-19T00:00:00Z,2026-11-19T01:00:00Z,gaming
"""


def test_csv_rows_that_would_poison_reports_are_quarantined(warehouse_file):
    with warehouse.open_writer(warehouse_file) as con:
        _warehouse(con)
        parsed = parse_jobs_csv(CSV, "jobs.csv", set(CONFIG.projects()), now=NOW, limits=job_limits(con))
        warehouse.upsert(con, "jobs", parsed.jobs)
        warehouse.quarantine(con, parsed.rejected)
        summary = queries.warehouse_summary(con)
    reasons = {r.location.rsplit(":", 1)[1]: r.reason for r in parsed.rejected}
    # Lines: 2 ok, 3 old, 4 future, 5 skewed (5 min ahead: within the 10-min skew, lands), 6 huge,
    # 7 wide (17 GPUs, the cluster has 16), 8 model, 9 kind.
    assert parsed.jobs["job_id"].to_list() == ["ok", "skewed"]
    assert reasons["3"].startswith("start_time: 1970-01-01") and "before 2000-01-01" in reasons["3"]
    assert reasons["4"].startswith("end_time: 2027-11-19 00:00:00 is in the future")
    assert reasons["6"].startswith("gpus: 1e+09 is more than the 4096 GPUs one job may hold")
    assert reasons["7"] == "gpus: 17 is more than cluster 'c1' has in all (16 GPUs)"
    assert reasons["8"].startswith("gpu_model: 'Q9000' is not a known GPU model")
    assert reasons["9"].startswith("kind: 'gaming' is not a job kind")
    # Allocated: ok 2 × 4 h = 8, skewed 2 × (19th 00:00 .. 20th 12:05 = 36 h 5 min) = 72.1667: 80.1667,
    # not a billion GPU-hours; "now" is skewed's end, the newest event.
    assert abs(summary["gpu_hours_allocated"] - (8 + 2 * (36 + 5 / 60))) < 1e-6
    assert summary["as_of_utc"] == datetime(2026, 11, 20, 12, 5)


SACCT = """JobID|Cluster|Account|State|AllocTRES|Start|End
11|c1|vision|COMPLETED|gres/gpu:h100=2|2026-11-19T00:00:00|2026-11-19T01:00:00
12|c1|marketing|COMPLETED|gres/gpu:h100=2|2026-11-19T00:00:00|2026-11-19T01:00:00
13|c1|nlp|RUNNING|gres/gpu:h100=1000000000|2026-11-19T00:00:00|Unknown
14|c1|nlp|COMPLETED|gres/gpu:h100=1|2026-11-19T00:00:00|2031-01-01T00:00:00
"""


def test_slurm_accounts_that_are_not_projects_are_quarantined(warehouse_file):
    batch = parse_parsable(SACCT, origin="sacct.txt", now=NOW)
    with warehouse.open_writer(warehouse_file) as con:
        _warehouse(con)
        result = write_sacct(con, batch)
        jobs = [r[0] for r in con.execute("SELECT job_id FROM jobs ORDER BY job_id").fetchall()]
        bad = dict(con.execute("SELECT location, reason FROM quarantine WHERE source = 'slurm-sacct'").fetchall())
    # Today job 12 lands under an account the tree does not have, while the CSV importer refuses it.
    assert jobs == ["11"]
    assert bad["sacct.txt:3"].startswith("Account: 'marketing' is not a project of the org tree")
    assert bad["sacct.txt:4"].startswith("gpus: 1e+09 is more than the 4096 GPUs")
    assert bad["sacct.txt:5"].startswith("end_time: 2031-01-01 00:00:00 is in the future")
    assert result.quarantined == 3


def _pod(name, namespace, gpus, kind=None):
    labels = {"gpuledger.io/kind": kind} if kind else {}
    return {"metadata": {"name": name, "namespace": namespace, "uid": f"u-{name}", "labels": labels,
                         "creationTimestamp": "2026-11-20T10:00:00Z"},
            "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": gpus}}}],
                     "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
            "status": {"phase": "Running", "startTime": "2026-11-20T10:00:00Z"}}


def test_kubernetes_pods_are_checked_like_every_source(warehouse_file):
    pods = [_pod("good", "vision", 2), _pod("stray", "sandbox", 1), _pod("greedy", "nlp", 64),
            _pod("odd", "nlp", 1, kind="mining")]
    records = [map_pod(p, cluster="c1", now=NOW) for p in pods]
    with warehouse.open_writer(warehouse_file) as con:
        _warehouse(con)
        write_pods(con, records, [], now=NOW)
        jobs = [r[0] for r in con.execute("SELECT scheduler_job FROM jobs").fetchall()]
        bad = dict(con.execute("SELECT location, reason FROM quarantine WHERE source = 'kubernetes'").fetchall())
    assert jobs == ["vision/good"]
    assert bad["sandbox/stray"].startswith("project: 'sandbox' is not a project of the org tree")
    assert bad["nlp/greedy"] == "gpus: 64 is more than cluster 'c1' has in all (16 GPUs)"
    assert bad["nlp/odd"].startswith("kind: 'mining' is not a job kind")


def test_limits_are_configurable():
    row = {"cluster": "c1", "project": "p", "gpus": 600.0, "start_time": NOW, "end_time": None}
    assert job_problem(row, JobLimits(), now=NOW) is None
    assert job_problem(row, JobLimits(max_gpus_per_job=512), now=NOW).startswith("gpus: 600 is more than the 512")
    cfg = Config.model_validate({"org": {"name": "a"}, "policy": {"jobs": {"max_gpus_per_job": 512,
                                                                          "clock_skew_minutes": 1}}})
    assert (cfg.policy.jobs.max_gpus_per_job, cfg.policy.jobs.clock_skew_minutes) == (512, 1)
