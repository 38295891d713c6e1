"""An enforcement cycle at Kueue's large-scale shape (issue 41): 1,000 projects, ~50,000 waiting and
running jobs. Not a test; prints each phase's seconds and peak RSS, and ``--json OUT`` writes them.

    .venv/bin/python benchmarks/enforce_shape_bench.py --gpus 40960 --projects 1000

The warehouse: the simulator's day (regime ai2-backlog, seed 1, samples hourly: the cycle reads
jobs, allocations, the inventory and the newest samples) under an org of ``--projects`` leaf
projects in 10 divisions, each with a budget; cached under ``--work`` behind a ``.done`` marker and
copied before each run (the cycle records its plan). Phases, one process, at the data's "now":

* observe — the live view: every running and waiting job as a Kueue Workload (namespace = project)
  listed by ``KueueBackend.observe`` through the official client from the Kubernetes stand-in
  (tests/helpers/k8s_standin.py), in pages of 500;
* gather — the Situation from the warehouse (facts as of now: fair share, funding, findings);
* decide — the policy with every job observed (as ``enforce replay`` does: the simulator's jobs are
  not Kueue's, so the stand-in's view is timed but not joined);
* record — the plan into the warehouse (enforcement_audit, warnings);
* write — the plan file (JSON), as ``enforce plan --out`` writes it (the pipelines only record);
* next_* — the next cycle at the same instant: gather, decide and record again (only actions whose
  reason changed are recorded: what a running deployment pays each cycle).

Each phase in wall seconds and in this process's CPU seconds (user + system): on a shared machine
the CPU figure is the steadier one. A cycle = observe + gather + decide + record.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import dagster as dg  # noqa: E402
from gpuledger.enforce import audit, inputs, policy  # noqa: E402
from gpuledger.enforce.backends import planfile  # noqa: E402
from gpuledger.enforce.backends.kueue import KueueBackend  # noqa: E402
from gpuledger.pipelines.defs.automation import DAILY_ANALYTICS  # noqa: E402
from gpuledger.pipelines.defs.resources import GpuledgerConfig, Warehouse  # noqa: E402
from gpuledger.pipelines.defs.squatting.assets import squatting_findings  # noqa: E402
from gpuledger.warehouse.clock import data_now  # noqa: E402
from gpuledger.warehouse.db import open_reader, open_writer  # noqa: E402

from gpuledger.config_store import stored_config  # noqa: E402
from tests.helpers.k8s_standin import KubeStandIn  # noqa: E402

EXAMPLE = ROOT / "gpuledger" / "data" / "example-config.yaml"
KINDS = ["llm-pretrain", "llm-posttrain", "vision-gen", "vision-eval", "protein-design", "inference-serving",
         "search-ranking", "notebooks", "ci-evals"]  # the simulator plans a project's work by these words


def org_config(projects: int) -> dict:
    """The example config with ``projects`` leaf projects in 10 divisions (shares 1-10, budgets
    8,000-11,999 GPU-hours a month), named after the simulator's kinds of work."""
    cfg = yaml.safe_load(EXAMPLE.read_text())
    divisions, budgets = [], []
    per = -(-projects // 10)
    for d in range(10):
        kids = []
        for n in range(d * per, min((d + 1) * per, projects)):
            name = f"{KINDS[n % len(KINDS)]}-{n:04d}"
            kids.append({"name": name, "shares": 1 + (n * 37) % 10})
            budgets.append({"node": name, "period": "2026-11", "gpu_hours": 8000 + (n * 53) % 4000})
        divisions.append({"name": f"division-{d:02d}", "shares": 10 + d, "children": kids})
    cfg["org"] = {"name": "acme", "children": divisions}
    cfg["budgets"] = budgets
    return cfg


def build(work: Path, gpus: int, projects: int, seed: int) -> Path:
    path = work / f"shape-{gpus}-{projects}-{seed}.duckdb"
    if (work / f"{path.name}.done").exists():
        return path
    work.mkdir(parents=True, exist_ok=True)
    config = work / f"org-{projects}.yaml"
    config.write_text(yaml.safe_dump(org_config(projects), sort_keys=False))
    path.unlink(missing_ok=True)
    subprocess.run([sys.executable, "-m", "gpuledger.cli", "simulate", "warehouse", "--gpus", str(gpus), "--days", "1",
                    "--interval", "3600", "--seed", str(seed), "--start", "2026-11-20T00:00:00", "-c", str(config),
                    "-w", str(path)], check=True, cwd=ROOT)
    (work / f"{path.name}.done").touch()
    return path


def materialized(work: Path, source: Path, projects: int) -> Path:
    """A copy of ``source`` with the read model the cycle reads materialized as the pipelines
    keep it: the day's analytics partition and the squatting findings at the data's "now". The
    month's statement is left out: a cycle does not read it."""
    path = source.with_name(source.stem + "-materialized.duckdb")
    if (work / f"{path.name}.done").exists():
        return path
    shutil.copyfile(source, path)
    with open_reader(path) as con:
        now = data_now(con)
    resources = {"warehouse": Warehouse(path=str(path)),
                 "gpuledger_config": GpuledgerConfig(path=str(work / f"org-{projects}.yaml"), warehouse_path=str(path))}
    quiet = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}
    with dg.DagsterInstance.ephemeral() as instance:
        for assets, extra in ((DAILY_ANALYTICS, {"partition_key": now.strftime("%Y-%m-%d")}), ([squatting_findings], {})):
            config = {**quiet, "ops": {"squatting_findings": {"config": {"as_of": now.isoformat()}}}} if not extra else quiet
            done = dg.materialize(assets, resources=resources, instance=instance, run_config=config, **extra)
            assert done.success, f"materializing {assets} failed"
    (work / f"{path.name}.done").touch()
    return path


def workloads(jobs) -> list[dict]:
    """Each job as the Workload Kueue would hold for it (admitted when it runs)."""
    out = []
    for j in jobs:
        name = j.job_id.replace("/", "-").replace(":", "-").lower()
        out.append({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
                    "metadata": {"name": name, "namespace": j.project, "uid": f"uid-{name}", "resourceVersion": "1",
                                 "labels": {"team": j.project}, "annotations": {}},
                    "spec": {"priority": 100, "active": True, "queueName": f"lq-{j.project}",
                             "podSets": [{"name": "main", "count": 1, "template": {"spec": {"containers": [
                                 {"name": "main", "resources": {"limits": {"nvidia.com/gpu": str(int(j.gpus) or 1)}}}]}}}]},
                    "status": {"conditions": [{"type": "QuotaReserved", "status": "True" if j.running else "False"}]}})
    return out


def _cpu() -> float:
    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_utime + use.ru_stime


def serve(listed: Path, kubeconfig: Path, ready, stop) -> None:
    """The Kubernetes stand-in holding the Workloads of ``listed`` until ``stop`` is set."""
    standin = KubeStandIn().start()
    for wl in json.loads(listed.read_text()):
        standin.kueue_workloads[(wl["metadata"]["namespace"], wl["metadata"]["name"])] = wl
    ready.put(str(standin.write_kubeconfig(kubeconfig)))
    stop.wait()
    standin.close()


class Phases:
    """Wall and CPU seconds (this process's user + system) of named phases."""

    def __init__(self) -> None:
        self.out: dict = {}

    def __call__(self, name: str):
        phases = self

        class _Timed:
            def __enter__(self):
                self.t, self.cpu = time.perf_counter(), _cpu()

            def __exit__(self, *exc):
                phases.out[f"{name}_s"] = round(time.perf_counter() - self.t, 3)
                phases.out[f"{name}_cpu_s"] = round(_cpu() - self.cpu, 3)

        return _Timed()


def decide(path: Path, cfg, now, timed: Phases, tag: str):
    with timed(f"{tag}gather"), open_reader(path) as con:
        situation = inputs.gather(con, cfg, now=now)
    situation = dataclasses.replace(situation, observed_by="the warehouse (replay)",
                                    jobs=[dataclasses.replace(j, observed={}) for j in situation.jobs])
    with timed(f"{tag}decide"):
        actions = policy.decide(situation, cfg.policy.enforcement.model_copy(update={"dry_run": True}))
    with timed(f"{tag}record"), open_writer(path) as con:
        audit.record_plan(con, actions, now=now)
    return situation, actions


def cycle(path: Path, plan_out: Path) -> dict:
    """The first cycle (every action recorded), then the next at the same instant (as a running
    deployment pays: only actions whose reason changed are recorded)."""
    timed = Phases()
    with timed("config"), open_reader(path) as con:
        cfg = stored_config(con).config
        now = data_now(con)
    with open_reader(path) as con:
        jobs = inputs.gather(con, cfg, now=now).jobs
    listed = path.parent / "workloads.json"
    listed.write_text(json.dumps(workloads(jobs)))
    ctx = multiprocessing.get_context("spawn")  # the stand-in in its own process: no GIL shared with the client
    ready, stop = ctx.Queue(), ctx.Event()
    server = ctx.Process(target=serve, args=(listed, path.parent / "standin.kubeconfig", ready, stop))
    server.start()
    try:
        kubeconfig = ready.get(timeout=300)
        with timed("observe"):  # wall: the stand-in's serving too; CPU: gpuledger's own
            seen = KueueBackend(kubeconfig=str(kubeconfig), cluster="sim").observe()
    finally:
        stop.set()
        server.join(timeout=30)
    situation, actions = decide(path, cfg, now, timed, "")
    with timed("write"):
        plan_out.write_text(planfile.to_json(actions, plan_id=None, planned_at=now))
    decide(path, cfg, now, timed, "next_")
    out = timed.out
    phases = ("observe", "gather", "decide", "record")
    out["cycle_cpu_s"] = round(sum(out[f"{p}_cpu_s"] for p in phases), 3)
    out["next_cycle_cpu_s"] = round(out["observe_cpu_s"] + sum(out[f"next_{p}_cpu_s"] for p in phases[1:]), 3)
    running = sum(j.running for j in situation.jobs)
    out |= {"projects_ranked": situation.fs_projects, "jobs": len(situation.jobs), "running": running,
            "waiting": len(situation.jobs) - running, "workloads_listed": len(seen), "actions": len(actions),
            "now": now.isoformat(), "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            "load_average": os.getloadavg()}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=40960)
    ap.add_argument("--projects", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--work", type=Path, default=ROOT / "data" / "bench" / "kueue-shape")
    ap.add_argument("--computed", action="store_true",
                    help="the facts computed in the cycle (no read model materialized), the worst case")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    source = build(args.work, args.gpus, args.projects, args.seed)
    if not args.computed:
        source = materialized(args.work, source, args.projects)
    copy = args.work / "cycle-copy.duckdb"
    shutil.copyfile(source, copy)
    out = cycle(copy, args.work / "plan.json")
    out |= {"gpus": args.gpus, "projects": args.projects, "seed": args.seed, "regime": "ai2-backlog",
            "read_model": "computed" if args.computed else "materialized"}
    print(json.dumps(out, indent=2))
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
