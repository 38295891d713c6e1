"""Run the whole asset graph once, in this process, over the data the warehouse already holds
(`gpuledger pipelines run-once`, `make demo`): the ingest assets (each configured source once,
the job CSV folder file by file), every day partition of the analytics from the first sample to
the data's "now", squatting evaluated every half hour over the last few hours, and the chargeback
statement of every month the data touches; every asset check with its asset. Runs are recorded in
the given Dagster instance (the one `dagster dev` shows when DAGSTER_HOME is the same)."""

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import dagster as dg
from gpuledger.pipelines.defs.automation import DAILY_ANALYTICS
from gpuledger.pipelines.defs.budgets.checks import budgets_consistent_down_tree
from gpuledger.pipelines.defs.chargeback.assets import chargeback_statements
from gpuledger.pipelines.defs.chargeback.checks import chargeback_no_negative_idle, chargeback_reconciles
from gpuledger.pipelines.defs.ingest import checks as ingest_checks
from gpuledger.pipelines.defs.ingest.assets import INGEST_ASSETS, csv_jobs, job_csv_partitions
from gpuledger.pipelines.defs.ingest.schedules import ingest_request
from gpuledger.pipelines.defs.ingest.sensors import folder_signatures
from gpuledger.pipelines.defs.partitions import monthly_partitions
from gpuledger.pipelines.defs.resources import GpuledgerConfig, Warehouse
from gpuledger.pipelines.defs.squatting.assets import squatting_findings
from gpuledger.pipelines.defs.usage.checks import job_usage_no_negative_idle, project_usage_no_negative_idle

from gpuledger import facts
from gpuledger import warehouse as wh
from gpuledger.errors import debug_wanted

TABLES = ("usage_hourly_jobs", "usage_hourly_projects", "utilization_hourly", "fairshare_snapshots",
          "budget_snapshots", "squatting_findings", "squatting_finding_events", "chargeback_statements")
INGEST_CHECKS = [ingest_checks.dcgm_samples_fresh, ingest_checks.dcgm_samples_unique,
                 ingest_checks.kubernetes_jobs_fresh, ingest_checks.slurm_jobs_fresh,
                 ingest_checks.prometheus_aggregates_fresh]
DAILY_CHECKS = [job_usage_no_negative_idle, project_usage_no_negative_idle, budgets_consistent_down_tree]
STATEMENT_CHECKS = [chargeback_reconciles, chargeback_no_negative_idle]


@dataclass
class RunOnceResult:
    runs: int = 0
    days: list[str] = field(default_factory=list)
    months: list[str] = field(default_factory=list)
    failed_checks: list[str] = field(default_factory=list)
    rows: dict[str, int] = field(default_factory=dict)


def run_once(*, warehouse_path: str | Path, config_path: str | Path | None, instance: dg.DagsterInstance,
             squatting_evaluations: int = 6, on_step: Callable[[str], None] = lambda _: None) -> RunOnceResult:
    """Materialize everything once (see the module docstring); raises when a run fails."""
    store = Warehouse(path=str(Path(warehouse_path).absolute()))
    resources = {"warehouse": store,
                 "gpuledger_config": GpuledgerConfig(path=str(Path(config_path).absolute()) if config_path else None,
                                                     warehouse_path=store.path)}
    out = RunOnceResult()

    def run(assets, what: str, run_config: dict | None = None, **kwargs) -> None:
        # steps quiet; a step's error is raised here and told in one line by the CLI (with its
        # traceback under --debug, when Dagster's own error log shows too)
        level = "WARNING" if debug_wanted() else "CRITICAL"
        quiet = {"loggers": {"console": {"config": {"log_level": level}}}}
        result = dg.materialize(assets, resources=resources, instance=instance, run_config={**quiet, **(run_config or {})},
                                **kwargs)
        out.runs += 1
        if not result.success:
            raise RuntimeError(f"run {result.run_id} ({what}) failed; see `dagster dev` or the log above")
        out.failed_checks += [f"{e.asset_key.to_user_string()}:{e.check_name} ({what})"
                              for e in result.get_asset_check_evaluations() if not e.passed]
        on_step(what)

    request = ingest_request(instance, resources["gpuledger_config"], None)  # as the every-minute schedule asks
    chosen = [a for a in INGEST_ASSETS if request.asset_selection is None or a.key in request.asset_selection]
    keys = {a.key for a in chosen}
    checks = [c for c in INGEST_CHECKS if {k.asset_key for k in c.check_keys} <= keys]
    run([*chosen, *checks], "ingest: reference tables, scrape; per cluster: Kubernetes, Slurm, TSDB aggregates, "
        "holdings pass", tags=request.tags or None)
    source = resources["gpuledger_config"].load().sources.jobs_csv
    if source and Path(source.folder).is_dir():
        files = sorted(folder_signatures(Path(source.folder), source.pattern))
        instance.add_dynamic_partitions(job_csv_partitions.name, files)
        for name in files:
            run([csv_jobs, ingest_checks.csv_jobs_fresh], f"ingest: job CSV {name}", partition_key=name)

    with wh.open_reader(warehouse_path) as con:
        first = con.execute("SELECT least((SELECT min(ts) FROM gpu_samples), (SELECT min(start_time) FROM jobs))"
                            ).fetchall()[0][0]
        now = facts.data_now(con)
    if first is None:
        on_step("no samples or jobs in the warehouse yet: analytics skipped")
        return _count_rows(out, warehouse_path)
    day = first.replace(hour=0, minute=0, second=0, microsecond=0)
    while day <= now:
        key = day.strftime("%Y-%m-%d")
        run([*DAILY_ANALYTICS, *DAILY_CHECKS], f"analytics {key}", partition_key=key)
        out.days.append(key)
        day += timedelta(days=1)
    for k in range(squatting_evaluations - 1, -1, -1):
        moment = now - timedelta(minutes=30 * k)
        if moment >= first:
            run([squatting_findings], f"squatting at {moment.isoformat()}Z",
                run_config={"ops": {"squatting_findings": {"config": {"as_of": moment.isoformat()}}}})
    for key in monthly_partitions.get_partition_keys():
        start = monthly_partitions.time_window_for_partition_key(key).start.replace(tzinfo=None)
        end = monthly_partitions.time_window_for_partition_key(key).end.replace(tzinfo=None)
        if end > first and start <= now:
            run([chargeback_statements, *STATEMENT_CHECKS], f"statement {key[:7]}", partition_key=key)
            out.months.append(key[:7])
    return _count_rows(out, warehouse_path)


def _count_rows(out: RunOnceResult, warehouse_path) -> RunOnceResult:
    with wh.open_reader(warehouse_path) as con:
        out.rows = {t: con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0] for t in TABLES}
    return out
