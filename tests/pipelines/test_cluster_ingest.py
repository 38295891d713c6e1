"""Every source in the pipelines, per cluster (issue 41): the ingest schedule's run over two cluster
partitions — window aggregates from one real VictoriaMetrics holding both clusters (told apart by
their `cluster` label), each cluster's Kubernetes API (a stand-in per cluster), each cluster's
Slurm export, and the holdings pass — into a real DuckDB file. Two clusters land as two clusters,
the aggregates equal what `gpuledger ingest prometheus --aggregate` stores for each, and a re-run
changes nothing."""

from __future__ import annotations

import io
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import pytest
from gpuledger.pipelines.defs.ingest import checks as ingest_checks
from gpuledger.pipelines.defs.ingest.assets import (
    holdings_links,
    kubernetes_jobs,
    prometheus_aggregates,
    prometheus_samples,
    slurm_jobs,
)
from gpuledger.pipelines.defs.ingest.schedules import ingest_schedule
from gpuledger.pipelines.defs.resources import GpuledgerConfig

from gpuledger import warehouse
from gpuledger.config import example_config_text
from gpuledger.ingest.holdings.store import holdings_frame, write_holdings
from gpuledger.simulator import build_cluster, write_openmetrics
from tests.helpers.victoria_rig import VictoriaRig, have_victoria_metrics
from tests.pipelines.test_assets import FIXTURES, ingest_run, materialize, metadata

WINDOW_S = 300


def _span() -> tuple[datetime, datetime, datetime]:
    """(now, start, end): two hours of 8 GPUs at a 60-s scrape, ending with the last whole window
    that ended at least 90 s before now (settle_s, 60 s by default: the pipelines leave a younger
    window for later). Taken when the servers start, not at collection: xdist may run this file
    minutes after it collected it, and the freshness check reads the wall clock."""
    now = datetime.utcnow()  # noqa: DTZ003 - naive UTC, as the warehouse stores times
    settled = now - timedelta(seconds=90)
    end = settled.replace(second=0, microsecond=0) - timedelta(minutes=settled.minute % 5)
    return now, end - timedelta(hours=2), end


def _labelled(text: str) -> str:
    """GPUs 0-3 carry cluster="east", 4-7 cluster="west" (a fleet TSDB's external label)."""
    return re.sub(r'\{gpu="(\d+)"', lambda m: f'{{cluster="{"east" if int(m[1]) < 4 else "west"}",gpu="{m[1]}"', text)


@pytest.fixture(scope="module")
def tsdb(tmp_path_factory):
    if not have_victoria_metrics():
        pytest.skip("needs Debian's victoria-metrics (scripts/install-test-deps.sh)")
    work = tmp_path_factory.mktemp("vm")
    now, start, end = _span()
    sim = build_cluster(seed=41, gpus=8, start=start, days=2 / 24, interval_s=60)
    text = io.StringIO()
    write_openmetrics(sim, text, sim.start_s, sim.end_s, blanks=False)
    vm = VictoriaRig(work)
    try:
        vm.import_prometheus_text(f"{line.rsplit(' ', 1)[0]} {line.rsplit(' ', 1)[1]}000\n"
                                  for line in _labelled(text.getvalue()).splitlines()
                                  if line and not line.startswith("#"))
        vm.flush()
        yield vm, now, start, end
    finally:
        vm.stop()


def _sacct(tmp_path: Path, cluster: str) -> Path:
    """The real sacct export of the fixtures as cluster ``cluster``'s, accounts renamed to projects."""
    path = tmp_path / f"sacct-{cluster}.txt"
    path.write_text((FIXTURES / "slurm" / "sacct-parsable2-running.txt").read_text()
                    .replace("|gpuledger|", f"|{cluster}|").replace("proj-a", "llm-pretrain")
                    .replace("proj-b", "vision-gen"))
    return path


def _state(path: Path) -> dict:
    """What the warehouse holds, without the times a re-read stamps (updated_at)."""
    with warehouse.open_reader(path) as con:
        return {
            "devices": dict(con.execute("SELECT cluster, list(gpu_uuid ORDER BY gpu_uuid) FROM gpus GROUP BY 1"
                                        ).fetchall()),
            "windows": dict(con.execute("SELECT g.cluster, count(*) FROM gpu_samples s JOIN gpus g USING (gpu_id) "
                                        "GROUP BY 1").fetchall()),
            "samples": con.sql("SELECT g.cluster, g.gpu_uuid, s.* EXCLUDE (gpu_id) FROM gpu_samples s "
                               "JOIN gpus g USING (gpu_id) ORDER BY ALL").pl(),
            "jobs": con.execute("SELECT cluster, job_id, source, state, start_time, end_time FROM jobs ORDER BY ALL"
                                ).fetchall(),
            "allocations": con.execute("SELECT * FROM job_allocations ORDER BY ALL").fetchall(),
        }


@pytest.mark.slow
@pytest.mark.prometheus
def test_two_clusters_land_as_two_partitions_from_every_source(tsdb, tmp_path):
    from tests.helpers.k8s_standin import KubeStandIn

    tsdb, now, start, end = tsdb
    from tests.ingest.test_kubernetes import make_pod

    apis = {c: KubeStandIn().start() for c in ("east", "west")}
    kubeconfigs = {}
    for cluster, api in apis.items():
        api.nodes = [{"metadata": {"name": "node-h100", "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}}}]
        api.add_pod(make_pod(f"train-{cluster}", labels={"gpuledger.io/project": "llm-pretrain"}, gpus=1))
        kubeconfigs[cluster] = api.write_kubeconfig(tmp_path / f"kubeconfig-{cluster}", context=cluster)
    config = tmp_path / "gpuledger.yaml"
    config.write_text(example_config_text().split("\nclusters:")[0] + (
        "\nsources:\n"
        f"  prometheus: {{url: '{tsdb.url}', aggregate_s: {WINDOW_S}, cluster_label: cluster,"
        " clusters: {east: {}, west: {}}}\n"
        "  kubernetes:\n" + "".join(f"    - {{kubeconfig: '{kubeconfigs[c]}', cluster: {c}}}\n" for c in apis)
        + "  slurm:\n" + "".join(f"    - {{file: '{_sacct(tmp_path, c)}', cluster: {c}}}\n" for c in apis)))
    path = tmp_path / "wh.duckdb"
    checks = [ingest_checks.prometheus_aggregates_fresh, ingest_checks.kubernetes_jobs_fresh]
    with dg.instance_for_test() as instance:
        placed = _runs(instance, apis, config, path, checks, now, start, end)
    _same_as_the_cli(tsdb, config, tmp_path, placed, start, end)


def _runs(instance, apis, config, path, checks, now, start, end) -> dict:
    try:
        # the schedule's tick: the cluster partitions are the config's clusters, one run over both
        with dg.build_schedule_context(
                instance=instance, scheduled_execution_time=now.replace(second=0, microsecond=0, tzinfo=UTC),
                resources={"gpuledger_config": GpuledgerConfig(path=str(config))}) as context:
            tick = ingest_schedule(context)
        assert instance.get_dynamic_partitions("clusters") == ["east", "west"]
        first = ingest_run(path, config, checks=checks, instance=instance)
        assert first.dagster_run.tags["dagster/asset_partition_range_start"] == tick.tags[
            "dagster/asset_partition_range_start"] == "east"
        for asset in (kubernetes_jobs, slurm_jobs, prometheus_aggregates, holdings_links):
            assert sorted(e.partition for e in first.asset_materializations_for_node(asset.op.name)) == ["east", "west"]
        assert all(e.passed for e in first.get_asset_check_evaluations()), first.get_asset_check_evaluations()
        aggregates = metadata(first, prometheus_aggregates)["by_cluster"]
        landed = _state(path)
        # two clusters of 4 GPUs each, every window of the two hours (the simulator's scrape gaps
        # aside) on both, the same count: the 4 GPUs of each share the one simulated node
        assert {c: len(u) for c, u in landed["devices"].items()} == {"east": 4, "west": 4}
        assert landed["windows"]["east"] == landed["windows"]["west"] == aggregates["east"]["rows_written"]
        assert 4 * 20 < aggregates["east"]["rows_written"] <= 4 * 24 and aggregates["west"]["left_for_next_run"] == 0
        by_cluster_jobs = {}
        for cluster, job_id, source, *_ in landed["jobs"]:
            by_cluster_jobs.setdefault(cluster, set()).add(source)
        assert by_cluster_jobs == {"east": {"kubernetes", "slurm-sacct"}, "west": {"kubernetes", "slurm-sacct"}}
        # raw backfill would count this TSDB twice beside its windows: it stands aside
        assert "aggregate_s is set" in metadata(materialize([prometheus_samples], path, config=config,
                                                            partition_key=start.strftime("%Y-%m-%d")),
                                                prometheus_samples)["skipped"]

        # each cluster's pod-resources agent reports its pod on the first GPU of its cluster
        with warehouse.open_writer(path) as con:
            pods = dict(con.execute("SELECT cluster, job_id FROM jobs WHERE source = 'kubernetes'").fetchall())
            gpu = {c: u[0] for c, u in landed["devices"].items()}
            write_holdings(con, holdings_frame([
                {"cluster": c, "source": "pod-resources", "scheduler_job": f"ml-vision/train-{c}", "host": "node-h100",
                 "device_id": gpu[c], "first_seen": end - timedelta(minutes=30), "last_seen": end, "gpu_uuid": gpu[c],
                 "pod_uid": pods[c], "namespace": "ml-vision", "pod": f"train-{c}", "resource": "nvidia.com/gpu"}
                for c in ("east", "west")]))
        second = ingest_run(path, config, instance=instance)
        links = metadata(second, holdings_links)["by_cluster"]
        assert {c: (links[c]["holdings"], links[c]["linked"]) for c in links} == {"east": (1, 1), "west": (1, 1)}
        assert metadata(second, prometheus_aggregates)["rows_written"] == 0  # every window already stored
        placed = _state(path)
        with warehouse.open_reader(path) as con:
            held = con.execute("SELECT a.cluster, a.job_id, g.gpu_uuid FROM job_allocations a JOIN gpus g "
                               "USING (gpu_id) WHERE a.source = 'pod-resources' ORDER BY 1").fetchall()
        assert held == [("east", pods["east"], gpu["east"]), ("west", pods["west"], gpu["west"])]

        third = ingest_run(path, config, instance=instance)  # the same sources again: nothing changes
        assert metadata(third, prometheus_aggregates)["rows_written"] == 0
        again = _state(path)
        assert {k: v for k, v in again.items() if k != "samples"} == {k: v for k, v in placed.items() if k != "samples"}
        assert again["samples"].equals(placed["samples"])
    finally:
        for api in apis.values():
            api.close()
    return placed


def _same_as_the_cli(tsdb, config, tmp_path, placed, start, end) -> None:
    # one code path: each cluster's windows as the CLI stores them, into a warehouse of their own
    day = start.replace(hour=0, minute=0, second=0, microsecond=0)
    cli = tmp_path / "cli.duckdb"
    last = end - timedelta(microseconds=1)  # the day of the last window (at midnight: the day before)
    for d in sorted({day, last.replace(hour=0, minute=0, second=0, microsecond=0)}):
        for cluster in ("east", "west"):
            done = subprocess.run([sys.executable, "-m", "gpuledger.cli", "ingest", "prometheus", "--url", tsdb.url,
                                   "--start", d.isoformat(), "--end", (d + timedelta(days=1)).isoformat(),
                                   "--aggregate", "5m", "--cluster", cluster, "--config", str(config),
                                   "-w", str(cli)], capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, done.stderr
    by_cli = _state(cli)["samples"].drop("ingested_at", strict=False)
    assert by_cli.height > 0
    assert by_cli.equals(placed["samples"].drop("ingested_at", strict=False))


@pytest.mark.slow
@pytest.mark.prometheus
def test_a_label_alone_makes_each_clusters_partition_from_the_tsdb(tsdb, tmp_path):
    """`cluster_label: cluster` and no `clusters:` list: the tick asks the TSDB which values the
    label takes on DCGM series (east, west), makes them the partitions, and the run stores each
    cluster's windows under its name — as a config that names them does. A TSDB that cannot
    answer leaves the partitions as they were."""
    tsdb, now, start, end = tsdb
    config = tmp_path / "gpuledger.yaml"
    config.write_text(example_config_text().split("\nclusters:")[0] + (
        "\nsources:\n"
        f"  prometheus: {{url: '{tsdb.url}', aggregate_s: {WINDOW_S}, cluster_label: cluster}}\n"))
    path = tmp_path / "wh.duckdb"
    with dg.instance_for_test() as instance:
        with dg.build_schedule_context(
                instance=instance, scheduled_execution_time=now.replace(second=0, microsecond=0, tzinfo=UTC),
                resources={"gpuledger_config": GpuledgerConfig(path=str(config))}) as context:
            ingest_schedule(context)
        assert instance.get_dynamic_partitions("clusters") == ["east", "west"]
        run = ingest_run(path, config, assets=[prometheus_aggregates], instance=instance)
        assert sorted(e.partition for e in run.asset_materializations_for_node(prometheus_aggregates.op.name)) == [
            "east", "west"]
        landed = _state(path)
        assert {c: len(u) for c, u in landed["devices"].items()} == {"east": 4, "west": 4}

        # the TSDB gone: the next tick keeps east and west (a warning in the tick's log)
        down = tmp_path / "down.yaml"
        down.write_text(config.read_text().replace(tsdb.url, "http://127.0.0.1:9"))
        with dg.build_schedule_context(
                instance=instance, scheduled_execution_time=now.replace(second=0, microsecond=0, tzinfo=UTC),
                resources={"gpuledger_config": GpuledgerConfig(path=str(down))}) as context:
            ingest_schedule(context)
        assert instance.get_dynamic_partitions("clusters") == ["east", "west"]
