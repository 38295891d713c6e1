"""The Dagster pipelines in-process: every asset materializes on a small simulated cluster (16 GPUs
x 6 hours), and each materialized table equals what the analytics functions return on the same
data; rematerializing a partition replaces it exactly; ingest assets skip sources the config
leaves out and ingest the ones it names (live simulated exporters, a Kubernetes stand-in, a Slurm
export, a folder of job CSVs)."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import dagster as dg
import polars as pl
import pytest
from gpuledger.pipelines.defs.automation import DAILY_ANALYTICS
from gpuledger.pipelines.defs.budgets.checks import budgets_consistent_down_tree
from gpuledger.pipelines.defs.chargeback.assets import chargeback_statements
from gpuledger.pipelines.defs.chargeback.checks import chargeback_no_negative_idle, chargeback_reconciles
from gpuledger.pipelines.defs.ingest import checks as ingest_checks
from gpuledger.pipelines.defs.ingest.assets import (
    INGEST_ASSETS,
    csv_jobs,
    dcgm_samples,
    holdings_links,
    job_csv_partitions,
    kubernetes_jobs,
    prometheus_aggregates,
    prometheus_samples,
    slurm_jobs,
)
from gpuledger.pipelines.defs.ingest.schedules import ingest_request
from gpuledger.pipelines.defs.resources import GpuledgerConfig, Warehouse
from gpuledger.pipelines.defs.squatting.assets import squatting_findings
from gpuledger.pipelines.defs.usage.checks import job_usage_no_negative_idle, project_usage_no_negative_idle
from polars.testing import assert_frame_equal

from gpuledger import facts, warehouse
from gpuledger.analytics import queries as query_layer
from gpuledger.config import example_config_text, load_config, read_config_file
from gpuledger.ledger.periods import statement_lines
from gpuledger.simulator import build_cluster, fixed_clock, start_exporters
from gpuledger.simulator.scenario import to_epoch_s
from gpuledger.simulator.to_warehouse import write_simulation
from tests.helpers.prometheus_rig import PrometheusRig, have_prometheus

START = datetime(2026, 11, 1)
DAY = "2026-11-01"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.fixture
def config_file():
    return read_config_file(None)  # (config, text, path) of the packaged example


@pytest.fixture
def sim(config_file):
    return build_cluster(seed=7, gpus=16, start=START, days=0.25, config=config_file[0])


@pytest.fixture
def sim_warehouse(tmp_path, sim, config_file):
    from gpuledger.ledger.config_versions import load_version

    path = tmp_path / "wh" / "gpuledger.duckdb"
    cfg, text, source = config_file
    with warehouse.open_writer(path) as con:
        load_version(con, cfg, text=text, source=source)  # as `gpuledger simulate warehouse` stores it
        write_simulation(con, sim)
    return path


def resources_for(path: Path, config: Path | None = None) -> dict:
    return {"warehouse": Warehouse(path=str(path)),
            "gpuledger_config": GpuledgerConfig(path=str(config) if config else None)}


def materialize(assets, path, *, config=None, **kwargs) -> dg.ExecuteInProcessResult:
    result = dg.materialize(assets, resources=resources_for(path, config), instance=kwargs.pop("instance", None)
                            or dg.DagsterInstance.ephemeral(), **kwargs)
    assert result.success
    return result


def table(path: Path, name: str, where: str = "", params: list | None = None) -> pl.DataFrame:
    with warehouse.open_reader(path) as con:
        return con.sql(f"SELECT * FROM {name} {where}", params=params or None).pl()


def same_rows(stored: pl.DataFrame, expected: pl.DataFrame, keys: list[str]) -> None:
    """The stored table (minus the pipeline's stamp columns) holds exactly ``expected``'s rows."""
    stored = stored.drop([c for c in ("day", "materialized_at", "as_of", "period", "covered_until") if c in stored.columns])
    expected = expected.select([c for c in stored.columns if c in expected.columns])
    assert set(stored.columns) == set(expected.columns), (stored.columns, expected.columns)
    assert_frame_equal(stored.select(expected.columns).sort(keys, nulls_last=True),
                       expected.sort(keys, nulls_last=True), check_dtypes=False, abs_tol=1e-9)


def metadata(result: dg.ExecuteInProcessResult, asset) -> dict:
    events = result.asset_materializations_for_node(asset.op.name)  # one per partition of the run
    assert events and all(e.metadata == events[0].metadata for e in events)
    return {k: v.value for k, v in events[0].metadata.items()}


@pytest.mark.slow
def test_daily_analytics_equal_the_reports_and_replace_their_partition(sim_warehouse):
    checks = [job_usage_no_negative_idle, project_usage_no_negative_idle, budgets_consistent_down_tree]
    result = materialize([*DAILY_ANALYTICS, *checks], sim_warehouse, partition_key=DAY)
    evaluations = result.get_asset_check_evaluations()
    assert len(evaluations) == len(checks) and all(e.passed for e in evaluations), evaluations

    start, end = START, START + timedelta(days=1)
    with warehouse.open_reader(sim_warehouse) as con:
        now = query_layer.data_now(con)
        jobs = query_layer.usage_report(con, start=start, end=end, by="job", per_hour=True)
        projects = query_layer.usage_report(con, start=start, end=end, by="project", per_hour=True)
        utilization = query_layer.utilization_report(con, start=start, end=end, by="model")
        fairshare = query_layer.fairshare_report(con, as_of=now).rename({"order": "queue_order"})
        budgets = query_layer.budget_report(con, as_of=now)
    assert jobs.height > 0 and jobs["gpu_hours_allocated"].sum() > 0
    same_rows(table(sim_warehouse, "usage_hourly_jobs"), jobs, ["hour", "cluster", "job_id"])
    same_rows(table(sim_warehouse, "usage_hourly_projects"), projects, ["hour", "project"])
    same_rows(table(sim_warehouse, "utilization_hourly"), utilization, ["hour", "cluster", "model"])
    same_rows(table(sim_warehouse, "fairshare_snapshots"), fairshare, ["node"])
    same_rows(table(sim_warehouse, "budget_snapshots"), budgets, ["node", "period_start"])
    assert table(sim_warehouse, "fairshare_snapshots")["as_of"].unique().to_list() == [now]
    # each day's hours carry the data's now they were computed at (migration 029: the read model
    # answers a range into the running day from them while that is still the now)
    for hourly in ("usage_hourly_jobs", "usage_hourly_projects", "utilization_hourly"):
        assert table(sim_warehouse, hourly)["covered_until"].unique().to_list() == [now], hourly
    assert metadata(result, DAILY_ANALYTICS[0])["rows"] == jobs.height

    # A stray row in the partition and a second materialization: the partition is exactly the new rows.
    with warehouse.open_writer(sim_warehouse) as con:
        con.execute("INSERT INTO usage_hourly_jobs (day, hour, cluster, job_id, gpu_hours_allocated, "
                    "materialized_at) VALUES (?, ?, 'sim', 'stray', 99, ?)", [start.date(), start, start]).fetchall()
    again = materialize(DAILY_ANALYTICS, sim_warehouse, partition_key=DAY)
    assert metadata(again, DAILY_ANALYTICS[0])["rows_replaced"] == jobs.height + 1
    same_rows(table(sim_warehouse, "usage_hourly_jobs"), jobs, ["hour", "cluster", "job_id"])
    assert table(sim_warehouse, "budget_snapshots").height == budgets.height

    # A day the data has not reached yet: nothing to snapshot, no rows, no error.
    later = materialize([DAILY_ANALYTICS[3]], sim_warehouse, partition_key="2026-11-05")
    assert metadata(later, DAILY_ANALYTICS[3])["as_of_utc"] == "no data yet"
    assert table(sim_warehouse, "fairshare_snapshots", "WHERE day = ?", ["2026-11-05"]).height == 0


@pytest.mark.slow
def test_a_range_of_days_in_one_run_equals_the_days_one_by_one(tmp_path, config_file):
    """A single-run backfill over two days (what `dg launch --partition-range` and a UI backfill
    ask for) replaces each day exactly as two single-day runs do."""
    from gpuledger.ledger.config_versions import load_version

    cfg, text, source = config_file
    sim = build_cluster(seed=11, gpus=8, start=datetime(2026, 10, 31, 21), days=0.25, config=cfg)  # over midnight
    path = tmp_path / "wh.duckdb"
    with warehouse.open_writer(path) as con:
        load_version(con, cfg, text=text, source=source)
        write_simulation(con, sim)
    ranged = materialize(DAILY_ANALYTICS, path, tags={"dagster/asset_partition_range_start": "2026-10-31",
                                                      "dagster/asset_partition_range_end": "2026-11-01"})
    assert metadata(ranged, DAILY_ANALYTICS[0])["partitions"] == 2
    tables = ["usage_hourly_jobs", "usage_hourly_projects", "utilization_hourly", "fairshare_snapshots",
              "budget_snapshots"]
    keys = {"usage_hourly_jobs": ["hour", "cluster", "job_id"], "usage_hourly_projects": ["hour", "project"],
            "utilization_hourly": ["hour", "cluster", "model"], "fairshare_snapshots": ["day", "node"],
            "budget_snapshots": ["day", "node", "period_start"]}
    as_range = {t: table(path, t).drop("materialized_at").sort(keys[t]) for t in tables}
    assert set(as_range["usage_hourly_jobs"]["day"].unique().to_list()) == {START.date() - timedelta(days=1),
                                                                           START.date()}
    for day in ("2026-10-31", "2026-11-01"):
        materialize(DAILY_ANALYTICS, path, partition_key=day)
    for t in tables:
        assert_frame_equal(table(path, t).drop("materialized_at").sort(keys[t]), as_range[t])
    with warehouse.open_reader(path) as con:
        first_day = query_layer.usage_report(con, start=datetime(2026, 10, 31), end=START, by="job", per_hour=True)
    same_rows(table(path, "usage_hourly_jobs", "WHERE day = ?", ["2026-10-31"]), first_day,
              ["hour", "cluster", "job_id"])


@pytest.mark.slow
def test_monthly_statement_equals_the_ledger_and_reconciles(sim_warehouse):
    checks = [chargeback_reconciles, chargeback_no_negative_idle]
    result = materialize([chargeback_statements, *checks], sim_warehouse, partition_key="2026-11-01")
    assert all(e.passed for e in result.get_asset_check_evaluations())
    with warehouse.open_reader(sim_warehouse) as con:
        expected = statement_lines(con, "2026-11", level="project", policy=load_config(None).policy)
    stored = table(sim_warehouse, "chargeback_statements")
    assert stored["period"].unique().to_list() == ["2026-11"]
    same_rows(stored, expected, ["line_kind", "project", "gpu_model", "tier"])
    assert stored["amount"].sum() == expected["amount"].sum()
    materialize([chargeback_statements], sim_warehouse, partition_key="2026-11-01")
    assert table(sim_warehouse, "chargeback_statements").height == expected.height

    # A wrong amount stored: the reconciliation check says so.
    with warehouse.open_writer(sim_warehouse) as con:
        con.execute("UPDATE chargeback_statements SET amount = amount + 0.01 WHERE line_kind = 'idle'").fetchall()
    failed = dg.materialize([chargeback_statements, chargeback_reconciles], resources=resources_for(sim_warehouse),
                            selection=dg.AssetSelection.checks(chargeback_reconciles), raise_on_error=False)
    [evaluation] = failed.get_asset_check_evaluations()
    assert not evaluation.passed and "2026-11" in evaluation.metadata["mismatches"].value


@pytest.mark.slow
def test_squatting_lifecycle_over_three_evaluations(sim_warehouse, sim):
    """Evaluated at three moments, the episodes agree with squatters_report at each, and every
    change is one event; the same moment twice changes nothing."""
    instance = dg.DagsterInstance.ephemeral()
    moments = [sim.start + timedelta(hours=h) for h in (3, 4, 6)]
    expected = {}
    with warehouse.open_reader(sim_warehouse) as con:
        for moment in moments:
            expected[moment] = query_layer.squatters_report(con, now=moment)
    assert any(f.height for f in expected.values()), "the simulated cluster should have squatters"
    for moment in moments:
        materialize([squatting_findings], sim_warehouse, instance=instance,
                    run_config={"ops": {"squatting_findings": {"config": {"as_of": moment.isoformat()}}}})
    episodes = table(sim_warehouse, "squatting_findings")
    events = table(sim_warehouse, "squatting_finding_events")
    last = expected[moments[-1]]
    open_now = episodes.filter(pl.col("resolved_at").is_null())
    same_rows(open_now.drop("first_seen", "last_seen", "resolved_at"), last, ["cluster", "job_id"])
    # an independent replay of the lifecycle: opened when first found, resolved when no longer
    # found, severity-changed when a continuing finding's severity or kind moves
    replay, was = set(), {}
    for moment in moments:
        now_found = {(r["cluster"], r["job_id"]): (r["finding"], r["severity"])
                     for r in expected[moment].iter_rows(named=True)}
        for key, state in now_found.items():
            if key not in was:
                replay.add((*key, "opened", moment))
            elif was[key] != state:
                replay.add((*key, "severity-changed", moment))
        replay |= {(*key, "resolved", moment) for key in was if key not in now_found}
        was = now_found
    assert set(events.select("cluster", "job_id", "event", "event_time").rows()) == replay
    assert episodes.select("cluster", "job_id", "first_seen").is_unique().all()
    # read back at each evaluation (the read model's episodes as of it, the open episodes' events
    # only: issue 41), each finding with the kind and severity it had then
    with warehouse.open_reader(sim_warehouse) as con:
        for moment in moments:
            read = facts.findings(con, policy=load_config(None).policy, now=moment, exact_moment=True)
            assert read.source == facts.MATERIALIZED
            assert sorted(read.frame.select("cluster", "job_id", "finding", "severity").rows()) == sorted(
                expected[moment].select("cluster", "job_id", "finding", "severity").rows())

    before = (episodes.height, events.height)
    repeat = materialize([squatting_findings], sim_warehouse, instance=instance,
                         run_config={"ops": {"squatting_findings": {"config": {"as_of": moments[-1].isoformat()}}}})
    assert "skipped" in metadata(repeat, squatting_findings)
    assert (table(sim_warehouse, "squatting_findings").height,
            table(sim_warehouse, "squatting_finding_events").height) == before


@pytest.mark.slow
def ingest_run(path: Path, config: Path | None, assets=None, checks=(), instance=None) -> dg.ExecuteInProcessResult:
    """One run as the every-minute ingest schedule asks it: the cluster partitions made the
    config's clusters, every one of them in the run."""
    instance = instance or dg.DagsterInstance.ephemeral()
    request = ingest_request(instance, GpuledgerConfig(path=str(config) if config else None), None)
    chosen = [a for a in (assets or INGEST_ASSETS) if request.asset_selection is None or a.key in request.asset_selection]
    return materialize([*chosen, *checks], path, config=config, instance=instance, tags=request.tags or None)


def test_ingest_assets_skip_sources_the_config_leaves_out(tmp_path):
    path = tmp_path / "wh.duckdb"
    checks = [ingest_checks.dcgm_samples_fresh, ingest_checks.kubernetes_jobs_fresh, ingest_checks.slurm_jobs_fresh,
              ingest_checks.dcgm_samples_unique, ingest_checks.prometheus_aggregates_fresh]
    result = ingest_run(path, None, checks=checks)  # the packaged example: one cluster (sim), no sources
    for asset in (dcgm_samples, kubernetes_jobs, slurm_jobs, prometheus_aggregates):
        assert "has no `sources." in metadata(result, asset)["skipped"]
    assert metadata(result, holdings_links)["by_cluster"] == {"sim": {
        "holdings": 0, "linked": 0, "no_device": 0, "no_job": 0, "disagreements": 0, "mig_unplaced": 0,
        "since_utc": "no holdings",
        "checkpoint_utc": "none"}}
    assert all(e.passed for e in result.get_asset_check_evaluations())
    backfill = materialize([prometheus_samples], path, partition_key=DAY)
    assert "sources.prometheus" in metadata(backfill, prometheus_samples)["skipped"]


def test_dcgm_samples_leaves_the_targets_to_the_scrape_service_where_it_runs(tmp_path, monkeypatch):
    # an unreachable target: had the asset scraped it, it would report one failed target
    config = _config_with_sources(tmp_path, "  scrape: {targets: ['http://127.0.0.1:9/metrics'], retries: 0, timeout_s: 1}\n")
    monkeypatch.setenv("GPULEDGER_SCRAPE_SERVICE", "1")
    served = metadata(materialize([dcgm_samples], tmp_path / "wh.duckdb", config=config), dcgm_samples)
    assert "scrape service" in served["skipped"] and "failed_targets" not in served
    monkeypatch.setenv("GPULEDGER_SCRAPE_SERVICE", "0")  # off: Dagster scrapes again
    assert metadata(materialize([dcgm_samples], tmp_path / "wh.duckdb", config=config), dcgm_samples)["failed_targets"] == 1


def _config_with_sources(tmp_path: Path, sources: str) -> Path:
    path = tmp_path / "gpuledger.yaml"
    path.write_text(example_config_text() + "\nsources:\n" + sources)
    return path


@pytest.mark.slow
def test_ingest_assets_write_from_live_sources_and_are_idempotent(tmp_path, sim):
    from tests.helpers.k8s_standin import KubeStandIn
    from tests.ingest.test_kubernetes import make_pod

    standin = KubeStandIn().start()
    standin.nodes = [{"metadata": {"name": "node-h100", "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}}}]
    standin.add_pod(make_pod("train-0", labels={"gpuledger.io/project": "llm-pretrain"}, gpus=8))
    standin.add_pod(make_pod("broken", gpus="two"))
    kubeconfig = standin.write_kubeconfig(tmp_path / "kubeconfig")
    path = tmp_path / "wh.duckdb"
    sacct = tmp_path / "sacct.txt"  # a real sacct export, its accounts renamed to projects of the org tree
    sacct.write_text((FIXTURES / "slurm" / "sacct-parsable2-running.txt").read_text()
                     .replace("proj-a", "llm-pretrain").replace("proj-b", "vision-gen"))
    try:
        with start_exporters(sim, port=0, clock=fixed_clock(to_epoch_s(sim.start) + 1800), nodes=[0, 1],
                             timestamps=True) as live:  # sample times from the page: the same page twice
            config = _config_with_sources(tmp_path, (
                f"  scrape: {{targets: [{', '.join(live.urls)}, 'http://127.0.0.1:9/metrics'], cluster: sim,"
                " retries: 0, timeout_s: 2}\n"
                f"  kubernetes: {{kubeconfig: '{kubeconfig}', cluster: k8s}}\n"
                f"  slurm: {{file: '{sacct}'}}\n"))
            checks = [ingest_checks.dcgm_samples_unique, ingest_checks.kubernetes_jobs_fresh]
            instance = dg.DagsterInstance.ephemeral()
            first = ingest_run(path, config, checks=checks, instance=instance)
            second = ingest_run(path, config, instance=instance)
    finally:
        standin.close()
    scrape = metadata(first, dcgm_samples)
    assert scrape["failed_targets"] == 1 and scrape["rows_written"] == 16 and scrape["rows_quarantined"] >= 1
    assert metadata(second, dcgm_samples)["rows_written"] == 0  # the same page again: nothing new
    k8s = metadata(first, kubernetes_jobs)
    assert (k8s["rows_written"], k8s["rows_quarantined"]) == (1, 1)
    assert metadata(first, slurm_jobs)["rows_written"] >= 1
    assert all(e.passed for e in first.get_asset_check_evaluations())
    with warehouse.open_reader(path) as con:
        counts = warehouse.table_counts(con, ("gpu_samples", "jobs"))
        assert con.execute("SELECT count(*) FROM jobs WHERE cluster = 'k8s'").fetchone()[0] == 1
    assert counts["gpu_samples"] == 16


def test_csv_jobs_partition_imports_one_file(tmp_path):
    folder = tmp_path / "incoming"
    folder.mkdir()
    (folder / "jobs.csv").write_text(
        "job_id,cluster,project,user,gpu_model,gpus,start_time,end_time\n"
        "j1,c1,llm-pretrain,ann,H100,8,2026-11-01T00:00:00Z,2026-11-01T02:00:00Z\n"
        "j2,c1,no-such-project,bob,H100,1,2026-11-01T00:00:00Z,\n")
    config = _config_with_sources(tmp_path, f"  jobs_csv: {{folder: '{folder}'}}\n")
    path = tmp_path / "wh.duckdb"
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(job_csv_partitions.name, ["jobs.csv"])
    for _ in range(2):
        result = materialize([csv_jobs, ingest_checks.csv_jobs_fresh], path, config=config, instance=instance,
                             partition_key="jobs.csv")
        assert (metadata(result, csv_jobs)["rows_written"], metadata(result, csv_jobs)["rows_quarantined"]) == (1, 1)
    with warehouse.open_reader(path) as con:
        assert con.execute("SELECT job_id FROM jobs").fetchall() == [("j1",)]
        assert con.execute("SELECT count(*) FROM quarantine WHERE source = 'jobs-csv'").fetchone()[0] == 1


@pytest.mark.slow
@pytest.mark.prometheus
@pytest.mark.skipif(not have_prometheus(), reason="needs the Debian prometheus package (install-test-deps.sh)")
def test_prometheus_samples_backfill_one_day_from_a_real_prometheus(tmp_path):
    """A day partition backfilled from a real Prometheus holding an hour of simulated history
    equals the plain backfill of that day; the same partition again writes nothing."""
    from gpuledger.ingest.metrics.prometheus.backfill import backfill
    from gpuledger.simulator import write_openmetrics

    day = (datetime.utcnow() - timedelta(days=1)).replace(hour=10, minute=0, second=0, microsecond=0)  # noqa: DTZ003
    history = build_cluster(seed=9, gpus=8, start=day, days=1 / 24, config=load_config(None))
    om = tmp_path / "history.om"
    with open(om, "w") as handle:
        write_openmetrics(history, handle, history.start_s, history.end_s)
    with PrometheusRig(tmp_path / "prom", [], history_file=om) as prom:
        prom.wait_for(lambda: prom.scalar("count(count_over_time(DCGM_FI_DEV_GPU_UTIL[2d]))"), 60, "history loaded")
        config = _config_with_sources(tmp_path, f"  prometheus: {{url: '{prom.url}', cluster: hist}}\n")
        path = tmp_path / "wh.duckdb"
        key = day.strftime("%Y-%m-%d")
        first = materialize([prometheus_samples, ingest_checks.prometheus_samples_unique], path, config=config,
                            partition_key=key)
        again = materialize([prometheus_samples], path, config=config, partition_key=key)
        plain = tmp_path / "plain.duckdb"
        start = day.replace(hour=0)
        backfill(prom.url, start, start + timedelta(days=1), warehouse_path=plain, cluster="hist", processes=False)
    written = metadata(first, prometheus_samples)["rows_written"]
    assert written > 0 and metadata(again, prometheus_samples)["rows_written"] == 0
    assert all(e.passed for e in first.get_asset_check_evaluations())
    query = ("SELECT gpu_uuid, mig_instance_id, ts, gpu_util_ratio, power_w FROM gpu_samples JOIN gpus USING (gpu_id) "
             "ORDER BY ALL")
    with warehouse.open_reader(path) as con:
        via_asset = con.sql(query).pl()
    with warehouse.open_reader(plain) as con:
        via_backfill = con.sql(query).pl()
    assert via_asset.height == written
    assert_frame_equal(via_asset, via_backfill)


def test_a_run_migrates_a_warehouse_that_is_behind(tmp_path):
    """Readers never change the file, so the Warehouse resource brings it up to date (one short
    writer) before a run's steps read it."""
    import duckdb
    from gpuledger.warehouse.db import migrations

    path = tmp_path / "old.duckdb"
    con = duckdb.connect(str(path))
    warehouse.apply_migrations(con, target=8)  # a file written before the materialized tables
    con.close()
    materialize([DAILY_ANALYTICS[3]], path, partition_key=DAY)
    with warehouse.open_reader(path) as con:
        assert warehouse.schema_version(con) == migrations()[-1][0]


# the columns enforcement reads of a finding (enforce.inputs.gather)
ENFORCEMENT_FINDING = ["cluster", "job_id", "finding", "severity", "idle_since", "idle_minutes", "gpus_idle",
                       "gpus_total", "gpu_hours_idle", "idle_cost", "currency", "exempt", "exempt_reason"]


@pytest.mark.slow
def test_squatting_stores_exempt_findings_and_enforcement_reads_them_materialized(tmp_path, sim, monkeypatch):
    """With one squatter's workload kind exempt from squatting, the asset stores that job apart
    (squatting_exempt_findings), the episodes stay exactly the non-exempt findings, and
    facts.findings answers from the stored rows — with and without exempt jobs — exactly what the
    report computes at the same moment; enforcement's plan is the same either way."""
    from gpuledger.enforce import cycle

    from gpuledger import facts
    from gpuledger.ledger.config_versions import load_version

    moment = sim.start + timedelta(hours=6)
    path = tmp_path / "wh" / "gpuledger.duckdb"
    with warehouse.open_writer(path) as con:
        write_simulation(con, sim)
        squatters = query_layer.squatters_report(con, now=moment)
    assert squatters.height >= 2, "the simulated cluster should have squatters"
    kind = squatters["job_kind"][0]
    text = example_config_text().replace("exempt_kinds: []", f"exempt_kinds: [{kind}]", 1)
    assert text != example_config_text()
    config = tmp_path / "gpuledger.yaml"
    config.write_text(text)
    cfg = load_config(config)
    with warehouse.open_writer(path) as con:
        load_version(con, cfg, text=text, source=config)  # the stored config is the pipeline's

    result = materialize([squatting_findings], path, config=config,
                         run_config={"ops": {"squatting_findings": {"config": {"as_of": moment.isoformat()}}}})
    computed_calls = []  # include_exempt of every squatters_report call from here on
    real = query_layer.squatters_report

    def computing(*args, **kwargs):
        computed_calls.append(kwargs.get("include_exempt"))
        return real(*args, **kwargs)

    with warehouse.open_reader(path) as con:
        every = real(con, policy=cfg.policy, now=moment, include_exempt=True)
        plain = real(con, policy=cfg.policy, now=moment)
        monkeypatch.setattr(query_layer, "squatters_report", computing)
        served = {x: facts.findings(con, policy=cfg.policy, now=moment, include_exempt=x) for x in (False, True)}
        materialized_plan, _ = cycle.decide_at(con, cfg, moment)
    assert computed_calls == []  # enforcement's findings came from the stored rows
    with warehouse.open_reader(path) as con:  # a cycle a minute later never acts on T's findings
        cycle.decide_at(con, cfg, moment + timedelta(minutes=1))
    assert computed_calls == [True]
    computed_calls.clear()
    exempt = every.filter(pl.col("exempt"))
    assert exempt.height >= 1 and set(exempt["job_kind"]) == {kind}
    assert plain.height == every.height - exempt.height
    meta = metadata(result, squatting_findings)
    assert (meta["findings"], meta["exempt_findings"]) == (plain.height, exempt.height)
    # the episodes hold the non-exempt findings only, as before migration 018
    same_rows(table(path, "squatting_findings").drop("first_seen", "last_seen", "resolved_at"),
              plain, ["cluster", "job_id"])
    same_rows(table(path, "squatting_exempt_findings").drop("evaluated_at"), exempt, ["cluster", "job_id"])
    assert table(path, "squatting_exempt_evaluations").rows() == [(moment, exempt.height)]

    for include_exempt, expected in ((False, plain), (True, every)):
        got = served[include_exempt]
        assert got.source == facts.MATERIALIZED and got.as_of == moment
        columns = [c for c in ENFORCEMENT_FINDING if include_exempt or not c.startswith("exempt")]
        assert_frame_equal(got.frame.select(columns).sort("cluster", "job_id"),
                           expected.select(columns).sort("cluster", "job_id"), check_dtypes=False)
        # `report squatters` prints the stored rows as the report: its columns, types and row order
        assert_frame_equal(facts.as_polars(facts.squatters_table(got)), expected)

    # the same plan from the computed findings: no exempt findings stored -> computed
    monkeypatch.setattr(facts, "_exempt_stored", lambda con, evaluated: False)
    with warehouse.open_reader(path) as con:
        computed_plan, situation = cycle.decide_at(con, cfg, moment)
    assert computed_calls == [True]
    assert any(f.job_id in set(exempt["job_id"]) for f in situation.findings)
    assert [vars(a) for a in computed_plan] == [vars(a) for a in materialized_plan]
    assert len(materialized_plan) > 0


@pytest.mark.slow
def test_the_chargeback_page_reads_the_statement_view_while_it_is_as_new_as_the_data(sim_warehouse):
    # The chargeback asset stores the month's statement as the page shows it (statement_views);
    # the page's view read from it equals the statement built now, field by field, for the org and
    # for any node; the downloads are the files `gpuledger report statement` writes. Once the data,
    # an input or the ledger moves, the page builds the statement again instead.
    import tempfile

    from gpuledger.dashboards import queries
    from gpuledger.warehouse.clock import data_now

    from gpuledger.facts import statement_views
    from gpuledger.ledger.periods import close_period
    from gpuledger.reports.statement.build import build_statement
    from gpuledger.reports.statement.files import write_statement_files
    from gpuledger.reports.statement.summary import StatementSummary

    path = str(sim_warehouse)
    assert queries.statement(path, "2026-11", None).source == "computed"  # nothing materialized yet
    materialize([chargeback_statements], sim_warehouse, partition_key="2026-11-01")
    with warehouse.open_reader(sim_warehouse) as con:
        nodes = sorted(r[0] for r in con.execute("SELECT node FROM org_nodes").fetchall())
    # the whole org, then every node (the root, business units, projects with and without usage)
    picks, with_usage = [None, *nodes], set()

    def built(node):
        with warehouse.open_reader(sim_warehouse) as con:
            st = build_statement(con, "2026-11", node=node)
        return st, queries.StatementView.of(StatementSummary.of(st), "computed", path=path, node=node, statement=st)

    for node in picks:
        shown = queries.statement(path, "2026-11", node)
        st, want = built(node)
        assert shown.source == "materialized", node
        assert shown.lines.height == want.lines.height, node
        if any(n.endswith("-by-host.csv") for n in want.file_names):
            with_usage.add(node)
        assert_frame_equal(shown.lines, want.lines)  # dtypes too: Decimal amounts, Int32 revisions
        for name in ("period", "scope", "status", "closed", "provisional", "billed_through", "totals",
                     "reconciliation", "reconciles", "notes", "file_names"):
            assert getattr(shown, name) == getattr(want, name), (node, name)
        assert (shown.reconciles is None) == (node is not None)  # reconciled on the org's statement only
        with tempfile.TemporaryDirectory() as tmp:
            stem = f"statement-2026-11-{queries.file_slug(st.scope)}"
            finance = {p.name: p.read_bytes() for p in write_statement_files(st, Path(tmp), stem)}
        assert shown.files == finance, node  # byte for byte, and named as the buttons are
        assert list(shown.file_names) == list(finance)
    assert None in with_usage and set(nodes) - with_usage  # nodes with usage and without: both file sets

    # Late data that moves the data's "now" (the newest sample, five minutes later): built again.
    with warehouse.open_writer(sim_warehouse) as con:
        con.execute("UPDATE gpu_samples SET ts = ts + INTERVAL 5 MINUTE "
                    "WHERE ts = (SELECT max(ts) FROM gpu_samples)").fetchall()
    later = queries.statement(path, "2026-11", None)
    assert later.source == "computed"
    assert later.lines.equals(built(None)[1].lines)
    materialize([chargeback_statements], sim_warehouse, partition_key="2026-11-01")
    assert queries.statement(path, "2026-11", None).source == "materialized"

    # A late import that leaves the data's "now" where it was: a finished allocation's end time
    # corrected an hour earlier (sacct read again). Its hours, not "now", change: built again,
    # and the page's lines are the corrected ones, not the stored view's.
    with warehouse.open_writer(sim_warehouse) as con:
        now_before = data_now(con)
        con.execute("UPDATE job_allocations SET end_time = end_time - INTERVAL 1 HOUR WHERE (cluster, job_id, gpu_id, "
                    "start_time) = (SELECT (cluster, job_id, gpu_id, start_time) FROM job_allocations "
                    "WHERE end_time >= start_time + INTERVAL 2 HOUR AND end_time < TIMESTAMP '2026-11-07' "
                    "ORDER BY end_time DESC, job_id LIMIT 1)").fetchall()
        assert data_now(con) == now_before
    corrected = queries.statement(path, "2026-11", None)
    assert corrected.source == "computed"
    assert corrected.lines.equals(built(None)[1].lines)
    def charged(view):
        return view.lines.filter(pl.col("line_kind") == "charge")["gpu_hours"].sum()

    assert charged(corrected) < charged(later)  # the hour is charged no more (the idle line has it)
    materialize([chargeback_statements], sim_warehouse, partition_key="2026-11-01")
    assert queries.statement(path, "2026-11", None).source == "materialized"

    # The month ends: the first data of December moves "now" past it, so November's statement
    # bills the whole month (idle capacity through 1 Dec), not through 7 Nov: built again.
    def december_sample(day: int) -> None:
        with warehouse.open_writer(sim_warehouse) as con:
            con.execute(f"INSERT INTO gpu_samples SELECT * REPLACE (TIMESTAMP '2026-12-{day:02d} 12:00' AS ts) "
                        "FROM gpu_samples WHERE ts = (SELECT max(ts) FROM gpu_samples) LIMIT 1").fetchall()

    december_sample(2)
    month_done = queries.statement(path, "2026-11", None)
    assert month_done.source == "computed" and month_done.billed_through == datetime(2026, 12, 1)
    materialize([chargeback_statements], sim_warehouse, partition_key="2026-11-01")
    # ... and then stays readable while December's data and jobs arrive: nothing of November moved
    december_sample(3)
    with warehouse.open_writer(sim_warehouse) as con:
        con.execute("INSERT INTO jobs SELECT * REPLACE (job_id || '-dec' AS job_id, TIMESTAMP '2026-12-03' AS "
                    "submit_time, NULL AS start_time, NULL AS end_time) FROM jobs ORDER BY job_id LIMIT 1").fetchall()
    in_december = queries.statement(path, "2026-11", None)
    assert in_december.source == "materialized"
    assert_frame_equal(in_december.lines, built(None)[1].lines)
    assert in_december.totals == month_done.totals

    # Closing the month moves the ledger's mark: the page shows the closed statement, built.
    with warehouse.open_writer(sim_warehouse) as con:
        close_period(con, "2026-11", by="finance", now=datetime(2026, 12, 2), allow_provisional=True)
    closed = queries.statement(path, "2026-11", None)
    assert closed.source == "computed" and closed.closed
    materialize([chargeback_statements], sim_warehouse, partition_key="2026-11-01")
    again = queries.statement(path, "2026-11", None)
    assert again.source == "materialized" and again.closed and again.status == closed.status
    assert_frame_equal(again.lines, closed.lines)

    # A warehouse whose reader predates the table (or lost it): no view, nothing raised.
    with warehouse.open_writer(sim_warehouse) as con:
        con.execute("DROP TABLE statement_views").fetchall()
    with warehouse.open_reader(sim_warehouse) as con:
        assert statement_views.fresh(con, "2026-11") is None
    assert queries.statement(path, "2026-11", None).source == "computed"
