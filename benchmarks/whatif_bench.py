"""What-if benchmark (issue 13): a simulated month replayed under the three scheduling policies.

Builds (once, cached under data/bench/) the simulator's month of ``--gpus`` GPUs (clean, seed 1,
samples every ``--interval`` s: the what-if reads job records and the hourly rollup, so the sample
interval changes the build time and, through the hourly activity of the few jobs with samples,
the useful GPU-hours by a fraction of a percent), then times: reading the trace, and each policy's
simulation and metrics. Prints the side-by-side figures, writes a markdown table to
data/bench/whatif-<gpus>.md and, with ``--json OUT``, the figures per policy (worst project
delivered ÷ owed and its name, all projects, the hour-by-hour figures beside them, useful
GPU-hours, simulate seconds) and the peak RSS.

    .venv/bin/python benchmarks/whatif_bench.py --gpus 256 --json out.json  # the 256-GPU month's figures
    .venv/bin/python benchmarks/whatif_bench.py --gpus 1024            # the "under 2 minutes" check
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import duckdb

from gpuledger.ledger.config_versions import config_for_command
from gpuledger.whatif import metrics
from gpuledger.whatif.compare import settle_period
from gpuledger.whatif.engine import effective_policy, org_nodes_frame, simulate
from gpuledger.whatif.model import POLICIES, Params
from gpuledger.whatif.trace import load_trace

START = datetime(2026, 11, 1)
FIGURES = (
    "worst_delivery_ratio",
    "worst_project",
    "delivery_ratio",
    "worst_delivery_ratio_hourly",
    "worst_project_hourly",
    "delivery_ratio_hourly",
    "occupancy_ratio",
    "useful_gpu_hours",
    "allocated_gpu_hours",
    "wait_p90_hours_small",
    "wait_p90_hours_large",
    "preemptions",
    "lost_gpu_hours",
    "squatted_gpu_hours",
    "squatters_reclaimed",
)


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", type=int, default=1024)
    ap.add_argument("--days", type=float, default=30)
    ap.add_argument("--interval", type=int, default=300)
    ap.add_argument(
        "--warehouse", type=Path, default=None, help="an existing warehouse instead of the cached build"
    )
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--half-life-days", type=float, default=None)
    ap.add_argument("--window-days", type=float, default=None)
    ap.add_argument("--usage-mode", default=None)
    ap.add_argument("--min-runtime-cap-hours", type=float, default=None)
    ap.add_argument("--default-min-runtime-hours", type=float, default=0.0)
    ap.add_argument("--json", type=Path, default=None, help="write the figures per policy here")
    ap.add_argument(
        "--enforcement",
        action="append",
        default=[],
        metavar="KEY=JSON",
        help="override a policy.enforcement key, e.g. max_lost_minutes=null or victim_fit='\"any\"'",
    )
    args = ap.parse_args()
    db = args.warehouse or ROOT / "data" / "bench" / f"month{args.gpus}-i{args.interval}.duckdb"
    if not db.exists():
        db.parent.mkdir(parents=True, exist_ok=True)
        t = time.perf_counter()
        subprocess.run(
            [
                str(ROOT / ".venv" / "bin" / "gpuledger"),
                "simulate",
                "warehouse",
                "--gpus",
                str(args.gpus),
                "--days",
                str(args.days),
                "--start",
                START.isoformat(),
                "--clean",
                "--interval",
                str(args.interval),
                "--warehouse",
                str(db),
            ],
            check=True,
        )
        print(f"built {db} in {time.perf_counter() - t:.0f} s", flush=True)
    end = START + timedelta(days=args.days)
    params = Params(
        usage_mode=args.usage_mode,
        half_life_days=args.half_life_days,
        window_days=args.window_days,
        min_runtime_cap_hours=args.min_runtime_cap_hours,
        default_min_runtime_hours=args.default_min_runtime_hours,
    )
    con = duckdb.connect(str(db), read_only=True)
    cfg, _ = config_for_command(con, None, write=False)
    if args.enforcement:  # a candidate rule: the warehouse's config with these enforcement keys changed
        over = {k: json.loads(v) for k, v in (a.split("=", 1) for a in args.enforcement)}
        enf = cfg.policy.enforcement.model_validate({**cfg.policy.enforcement.model_dump(), **over})
        cfg = cfg.model_copy(update={"policy": cfg.policy.model_copy(update={"enforcement": enf})})
    t = time.perf_counter()
    trace = load_trace(con, cfg, start=START, end=end, params=params)
    con.close()
    rows = [
        (
            "read trace",
            time.perf_counter() - t,
            (
                f"{len(trace.jobs)} jobs, {trace.inventory.physical_gpus()} GPUs, "
                f"{sum(j.activity_source == 'samples' for j in trace.jobs)} with activity from samples"
            ),
        )
    ]
    print(rows[-1], flush=True)
    summaries, sim_seconds = [], {}
    org = org_nodes_frame(cfg, params)
    usage, _, squatting = effective_policy(cfg, params)
    settle = settle_period(usage)
    for policy in args.policies.split(","):
        t = time.perf_counter()
        result = simulate(trace, cfg, policy, params)
        sim_s = time.perf_counter() - t
        t = time.perf_counter()
        summary, _ = metrics.summarize(result, org, squatting, settle)
        sim_seconds[policy] = sim_s
        rows.append(
            (f"simulate {policy}", sim_s, f"{result.decide_calls} enforce cycles decided, {result.actions}")
        )
        rows.append((f"metrics {policy}", time.perf_counter() - t, ""))
        summaries.append(summary)
        print(rows[-2], rows[-1], flush=True)
    built = f"{db.name}" if args.warehouse else f"built: samples every {args.interval} s"
    lines = [
        f"# What-if benchmark: {args.gpus} GPUs, {args.days:g} days ({built})",
        "",
        f"params: {params}; delivery settled per {settle.days:g} days"
        + (f"; enforcement overrides {args.enforcement}" if args.enforcement else ""),
        "",
        "| step | wall s | notes |",
        "|---|---:|---|",
    ]
    lines += [f"| {name} | {secs:.1f} | {note} |" for name, secs, note in rows]
    lines += [
        "",
        f"peak RSS {_rss_mib():.0f} MiB",
        "",
        "| figure | " + " | ".join(s["policy"] for s in summaries) + " |",
        "|---|" + "---:|" * len(summaries),
    ]
    for f in FIGURES:
        cells = [s[f] for s in summaries]
        lines.append(
            f"| {f} | " + " | ".join(f"{c:,.3f}" if isinstance(c, float) else str(c) for c in cells) + " |"
        )
    text = "\n".join(lines) + "\n"
    out = ROOT / "data" / "bench" / f"whatif-{args.gpus}.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(text)
    if args.json:
        keep = ("worst_delivery_ratio", "worst_project", "delivery_ratio", "worst_delivery_ratio_hourly",
                "worst_project_hourly", "delivery_ratio_hourly", "useful_gpu_hours", "occupancy_ratio",
                "preemptions", "lost_gpu_hours", "squatted_gpu_hours")
        report = {
            "gpus": args.gpus,
            "days": args.days,
            "warehouse": str(db),
            "jobs": len(trace.jobs),
            "settle_days": settle.total_seconds() / 86400,
            "read_trace_seconds": rows[0][1],
            "peak_rss_mib": _rss_mib(),
            "policies": {
                s["policy"]: {**{k: s[k] for k in keep}, "simulate_seconds": sim_seconds[s["policy"]]}
                for s in summaries
            },
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
