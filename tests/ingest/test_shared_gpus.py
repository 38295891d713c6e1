"""Shared GPUs (issue 39 §3): four HAMi pods at nvidia.com/gpucores 25 on one H100, read through the
real Kubernetes client from the stand-in API server, and a recorded dcgm-exporter page in its
virtual-GPU mode (tests/fixtures/exposition/dcgm-exporter-virtual-gpus.txt: one copy of every
series per pod, each pod's own DCGM_FI_DEV_GPU_UTIL) scraped every 30 s from 10:00 to 10:59:30.

  pod     gpucores  gpumem   own utilization   share held   active = min(util, share) × 1 h
  hami-a  25        4000     20 %              0.25         0.20 GPU-h (ratio 0.8)
  hami-b  25        4000     10 %              0.25         0.10 GPU-h (ratio 0.4)
  hami-c  25        4000      0 %              0.25         0.00 GPU-h (idle 0.25: a squatter's shape)
  hami-d  25        4000     25 %              0.25         0.25 GPU-h (ratio 1.0)
  allocated 4 × 0.25 = 1.00 GPU-hour = the GPU's whole hour: charge 1.00 × 2.00 = 2.00 USD, idle 0.00
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import polars as pl
import pytest

from gpuledger import warehouse
from gpuledger.analytics import queries
from gpuledger.ingest.jobs.k8s_mapping import MappingOptions
from gpuledger.ingest.jobs.kubernetes import KubernetesIngest, api_client
from gpuledger.ingest.metrics.exposition import parse_exposition
from gpuledger.ingest.metrics.pod_activity import per_pod_rows
from gpuledger.ingest.metrics.scrape import ingest_pages
from tests.helpers.k8s_standin import KubeStandIn
from tests.helpers.ledger_fixtures import load

PAGE = Path(__file__).parents[1] / "fixtures" / "exposition" / "dcgm-exporter-virtual-gpus.txt"
CONFIG = """
currency: USD
org:
  name: acme
  children:
    - {name: vision, shares: 1}
rate_card:
  - {gpu_model: H100, tier: reserved, price_per_gpu_hour: "2.00", effective_from: 2026-01-01}
"""
T10, T11 = datetime(2026, 11, 29, 10), datetime(2026, 11, 29, 11)
CLUSTER = "c1"


def hami_pod(name: str, cores: int = 25, mem: int = 4000) -> dict:
    limits = {"nvidia.com/gpu": 1, "nvidia.com/gpucores": cores, "nvidia.com/gpumem": mem}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml-vision", "uid": f"uid-{name}",
                     "creationTimestamp": "2026-11-29T09:59:00Z", "labels": {"gpuledger.io/project": "vision"}},
        "spec": {"nodeName": "node-h100",
                 "containers": [{"name": "main", "image": "serve:1", "resources": {"limits": limits}}]},
        "status": {"phase": "Succeeded", "startTime": "2026-11-29T10:00:00Z",
                   "containerStatuses": [{"name": "main", "ready": False, "restartCount": 0, "image": "serve:1",
                                          "imageID": "", "state": {"terminated": {
                                              "exitCode": 0, "reason": "Completed",
                                              "startedAt": "2026-11-29T10:00:00Z",
                                              "finishedAt": "2026-11-29T11:00:00Z"}}}]},
    }


@pytest.fixture
def shared(tmp_path):
    path = tmp_path / "wh.duckdb"
    with warehouse.open_writer(path) as con:
        load(con, CONFIG, at=datetime(2026, 11, 1))
        text = PAGE.read_text()
        start_ms = int((T10 - datetime(1970, 1, 1)).total_seconds() * 1000)  # naive UTC
        ingest_pages(con, [(text, f"page@{i}", start_ms + i * 30_000) for i in range(120)], cluster=CLUSTER)
    server = KubeStandIn().start()
    server.nodes = [{"metadata": {"name": "node-h100", "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}}}]
    for name in ("hami-a", "hami-b", "hami-c", "hami-d"):
        server.add_pod(hami_pod(name))
    try:
        KubernetesIngest(api_client(server.write_kubeconfig(tmp_path / "kubeconfig")), cluster=CLUSTER,
                         warehouse_path=path, options=MappingOptions(), clock=lambda: T11).sync()
    finally:
        server.close()
    return path


def test_four_hami_pods_at_25_percent_add_up_to_one_gpu_hour_and_reconcile_with_idle(shared):
    with warehouse.open_reader(shared) as con:
        jobs = con.execute("SELECT scheduler_job, gpus, gpu_memory_mib FROM jobs ORDER BY 1").fetchall()
        allocs = con.execute("SELECT job_id, gpu_fraction FROM job_allocations ORDER BY 1").fetchall()
        lines = queries.chargeback_report(con, f"{T10.isoformat()}..{T11.isoformat()}", now=T11)
    # cores share the GPU; memory kept beside it, never charged
    assert jobs == [(f"ml-vision/hami-{p}", 0.25, 4000.0) for p in "abcd"]
    assert allocs == [(f"uid-hami-{p}", 0.25) for p in "abcd"]  # every pod of the shared device linked
    charge = lines.filter(pl.col("line_kind") == "charge")
    idle = lines.filter(pl.col("line_kind") == "idle")
    assert charge["gpu_hours"].sum() == pytest.approx(1.0)
    assert sum(charge["amount"]) == pytest.approx(2.0)
    assert idle["gpu_hours"].sum() == pytest.approx(0.0, abs=1e-9)
    assert sum(charge["amount"]) + sum(idle["amount"]) == pytest.approx(2.0)  # = capacity 1 GPU-h × 2.00


def test_each_pod_gets_its_measured_active_gpu_hours_on_the_time_sliced_gpu(shared):
    with warehouse.open_reader(shared) as con:
        usage = queries.usage_report(con, start=T10, end=T11, by="job", now=T11)
    got = {r["job_id"]: r for r in usage.iter_rows(named=True)}
    for pod, active in (("a", 0.20), ("b", 0.10), ("c", 0.0), ("d", 0.25)):
        row = got[f"uid-hami-{pod}"]
        assert row["gpu_hours_allocated"] == pytest.approx(0.25)
        assert row["gpu_hours_active"] == pytest.approx(active, abs=1e-9), pod
        assert row["gpu_hours_idle"] == pytest.approx(0.25 - active, abs=1e-9), pod
        assert row["gpu_hours_unknown"] == 0.0  # measured, no longer "unknown"


def test_a_page_repeating_the_device_value_on_every_pod_stays_unknown():
    """An exporter before 4.6 (NVIDIA/dcgm-exporter#587) writes the device's utilization on each pod:
    four pods at 55 % would add up to 220 % of one GPU. Not a measurement: NULL, counted."""
    import re

    text = re.sub(r"^(DCGM_FI_DEV_GPU_UTIL\{.*\}) \d+$", r"\1 55", PAGE.read_text(), flags=re.M)
    assert text.count("} 55\n") == 4
    parsed = parse_exposition(text, scrape_ms=1_800_000_000_000)
    rows, repeated = per_pod_rows(parsed.samples)
    assert rows.height == 4 and repeated == 1
    assert rows["gpu_util_ratio"].is_null().all()
    assert rows["fb_used_bytes"].to_list() == [9000 * 2**20, 4000 * 2**20, 3500 * 2**20, 12000 * 2**20]
    own, none = per_pod_rows(parse_exposition(PAGE.read_text(), scrape_ms=1_800_000_000_000).samples)
    assert none == 0 and own["gpu_util_ratio"].to_list() == [0.2, 0.1, 0.0, 0.25]


def test_the_idle_pod_on_the_busy_shared_gpu_squats_and_its_neighbours_do_not(shared):
    """At 10:59:59, with no start-up grace and a 30-minute sustained window: the device itself is
    busy (graphics engine 0.55 on every copy), so by the device all four pods would look active.
    By their own utilization hami-c (0 % since 10:00) is idle for 59 minutes and squats; a, b and d
    are not idle."""
    from gpuledger.config import Policy, SquattingPolicy

    policy = Policy(squatting=SquattingPolicy(grace_minutes=0, sustained_minutes=30, warn_minutes=30,
                                              second_warn_minutes=40, preempt_minutes=50))
    with warehouse.open_reader(shared) as con:
        found = queries.squatters_report(con, policy=policy, now=datetime(2026, 11, 29, 10, 59, 59))
    assert found["job_id"].to_list() == ["uid-hami-c"]
    row = found.row(0, named=True)
    assert row["activity_signal"] == "gpu_util_per_pod" and row["idle_since"] == T10
    assert row["fb_used_bytes_idle"] == 3500 * 2**20  # the pod's own memory, not the device's


def test_pods_sharing_a_mig_instance_keep_their_memory_and_no_utilization():
    """GPU_UTIL reads 0 on MIG and the exporter measures only memory per process there: two pods on
    one 3g instance get their memory, their utilization unknown (never 0 % = idle)."""
    mig = ('gpu="0",UUID="GPU-mig-parent",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="node-m",'
           'GPU_I_PROFILE="3g.40gb",GPU_I_ID="2",namespace="ml-nlp",container="main"')
    text = "\n".join([f'DCGM_FI_DEV_GPU_UTIL{{{mig},pod="{p}",vgpu="{i}"}} 0' for i, p in enumerate(("x", "y"))]
                     + [f'DCGM_FI_DEV_FB_USED{{{mig},pod="{p}",vgpu="{i}"}} {m}'
                        for i, (p, m) in enumerate((("x", 1000), ("y", 2000)))]) + "\n"
    rows, _ = per_pod_rows(parse_exposition(text, scrape_ms=1_800_000_000_000).samples)
    assert rows["pod"].to_list() == ["x", "y"] and rows["gpu_util_ratio"].is_null().all()
    assert rows["fb_used_bytes"].to_list() == [1000 * 2**20, 2000 * 2**20]


def test_the_bulk_parser_gives_the_same_pod_rows_as_the_line_parser():
    from polars.testing import assert_frame_equal

    from gpuledger.ingest.metrics.exposition.bulk import parse_pages_bulk
    from gpuledger.ingest.metrics.pod_activity import shared_device_points

    text, ms = PAGE.read_text(), 1_800_000_000_000
    by_line, _ = per_pod_rows(parse_exposition(text, scrape_ms=ms).samples)
    bulk = parse_pages_bulk([(text, ms)])
    in_bulk, _ = per_pod_rows(shared_device_points(bulk.points, bulk.series))
    assert by_line.height == 4
    assert_frame_equal(by_line, in_bulk)
