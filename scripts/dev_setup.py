"""Prepare `make dev`: a config naming the simulator's live exporters as scrape targets and a
watched job-CSV folder holding the simulated cluster's job records, so the pipelines have real
sources to ingest; budgets for every month from the simulated start to today (the example's
November figures), and alerts to the local receiver's channel ``dev-alerts``
(scripts/dev_alert_receiver.py).

The cluster is built exactly as `gpuledger simulate serve` builds it for the same arguments
(jobs from a day before the simulated start), so the CSV's job ids are the ones the exporters'
pod / hpc_job labels name and device links join them. Jobs not yet started at the simulated start
are left out; jobs still running then have no end time. (A cut any later would move the data's
"now" past the samples, which start at the simulated start: no squatting evaluation could see them.)

    python scripts/dev_setup.py --out data/dev --gpus 16 --port 9400 --sim-start 2026-12-01T10:00:00
"""

from __future__ import annotations

import argparse
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl

from gpuledger.config import example_config_text, load_config
from gpuledger.simulator.labels import job_labels
from gpuledger.simulator.scenario import DEFAULT_CLUSTER, build_cluster
from gpuledger.simulator.to_warehouse import jobs_frame


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--gpus", type=int, default=16)
    parser.add_argument("--port", type=int, default=9400)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--sim-start", required=True, help="the simulated start given to `simulate serve`")
    parser.add_argument("--dashboard-url", default="http://127.0.0.1:8501", help="linked from the alerts")
    args = parser.parse_args()

    now = datetime.fromisoformat(args.sim_start)
    today = datetime.now(UTC).replace(tzinfo=None)
    config_path = args.out / "gpuledger.yaml"
    incoming = args.out / "incoming"
    incoming.mkdir(parents=True, exist_ok=True)
    # the packaged example's org tree (the simulator's projects) plus the two sources
    nodes = (args.gpus + 7) // 8
    targets = ", ".join(f'"http://127.0.0.1:{args.port + i}/metrics"' for i in range(nodes))
    config_path.write_text(
        dev_config_text(example_config_text(), months(now, today), args.dashboard_url).rstrip()
        + "\n\n# added by scripts/dev_setup.py for `make dev`\nsources:\n"
        f"  scrape: {{targets: [{targets}], cluster: {DEFAULT_CLUSTER}, timeout_s: 5, retries: 1}}\n"
        f"  jobs_csv: {{folder: \"{incoming.resolve()}\"}}\n")
    cfg = load_config(config_path)
    sim = build_cluster(seed=args.seed, gpus=args.gpus, start=now - timedelta(days=1), days=args.days + 1,
                        cluster=DEFAULT_CLUSTER, config=cfg, dirt=True)
    assert len(sim.hardware.node_host) == nodes, "one exporter port per node of 8 GPUs"

    # job ids as the scheduler names them on the exporters' labels: namespace/pod or the Slurm id
    labels = job_labels(sim).select(
        "job", pl.when(pl.col("pod").is_not_null()).then(pl.col("namespace") + "/" + pl.col("pod"))
        .otherwise(pl.col("hpc_job")).alias("scheduler_job"))
    jobs = jobs_frame(sim).with_row_index("job").with_columns(pl.col("job").cast(pl.Int64)).join(labels, on="job")
    started = jobs.filter(pl.col("start_time") <= now)
    csv = started.select(
        pl.col("scheduler_job").alias("job_id"), "cluster", "project", pl.col("user_name").alias("user"),
        "gpu_model", "gpus",
        *(pl.col(c).dt.strftime("%Y-%m-%dT%H:%M:%SZ").alias(c) for c in ("submit_time", "start_time")),
        pl.when(pl.col("end_time") <= now).then(pl.col("end_time").dt.strftime("%Y-%m-%dT%H:%M:%SZ"))
        .alias("end_time"),
        "name", "kind", "priority", "namespace",
    )
    csv.write_csv(incoming / "simulated-jobs.csv")

    print(f"{config_path}: {nodes} scrape targets from port {args.port}; "
          f"{incoming / 'simulated-jobs.csv'}: {csv.height} jobs")


def months(start: datetime, end: datetime) -> list[str]:
    """Every YYYY-MM from ``start``'s month to ``end``'s."""
    out, year, month = [], start.year, start.month
    while (year, month) <= (end.year, end.month):
        out.append(f"{year:04d}-{month:02d}")
        year, month = (year + 1, 1) if month == 12 else (year, month + 1)
    return out


def dev_config_text(text: str, periods: list[str], dashboard_url: str) -> str:
    """The example config with each of its November budgets repeated for ``periods`` (so budget
    snapshots and burn alerts have a current period) and alerts to the ``dev-alerts`` channel."""
    lines = text.splitlines()
    budget_lines = [line for line in lines if re.match(r"\s+- \{node: .*period: 2026-11,", line)]
    extra = [line.replace("period: 2026-11,", f"period: {p},") for p in periods if p != "2026-11"
             for line in budget_lines]
    at = lines.index(budget_lines[-1]) + 1
    lines[at:at] = extra
    # the example's own policy.alerts block, pointed at the receiver (a second `alerts:` key
    # would be a duplicate the YAML loader silently resolves to the last one)
    alerts = lines.index("  alerts:", lines.index("policy:"))
    for i in range(alerts + 1, len(lines)):
        if not lines[i].startswith("    "):
            break
        key = lines[i].split(":")[0].strip()
        if key == "on_call":
            lines[i] = "    on_call: [dev-alerts]          # make dev: the local receiver (data/dev/alerts.txt)"
        elif key == "dashboard_url":
            lines[i] = f"    dashboard_url: {dashboard_url}"
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
