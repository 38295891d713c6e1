"""Ingestion benchmarks (not a test): DCGM scrape throughput, parser comparison, Prometheus backfill.

    POLARS_MAX_THREADS=1 .venv/bin/python benchmarks/ingest_bench.py [--gpus 10240] [--backfill-gpus 64 --backfill-hours 6]

1. Scrape ingest of one scrape round of ~10,000 GPUs' exposition text (parse + clean + write into a
   fresh warehouse, one transaction) against the 15 s budget (a 30 s collect interval, half of it).
2. Our line-tolerant parser vs ``prometheus_client.parser.text_string_to_metric_families`` on the same
   text: one 8-GPU node page, and the whole batch.
3. Prometheus backfill: a real Prometheus loaded with simulated history (promtool blocks), backfilled
   through the HTTP API; the rate is extrapolated to a week of 1,024 GPUs at 30 s.

Run with POLARS_MAX_THREADS=1 (and ideally `taskset -c 0`) for the one-core figure.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import polars as pl  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

import warehouse  # noqa: E402
from gpuledger.ingest.dcgm_writes import store_wide  # noqa: E402
from gpuledger.ingest.exposition_parser import long_to_wide, parse_exposition  # noqa: E402
from gpuledger.ingest.prometheus import backfill  # noqa: E402
from gpuledger.simulator import build_cluster, metrics_page, write_openmetrics  # noqa: E402


def best_of(fn, repeat: int = 3) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def exposition_batch(gpus: int) -> tuple[str, str, int]:
    """(one node page, one text holding every node's page for ~``gpus`` GPUs, scrape ms). Built from
    a 1,024-GPU simulation, copied with distinct host names and UUIDs up to ``gpus``."""
    sim = build_cluster(seed=5, gpus=1024, start=datetime(2026, 11, 1), days=0.1)
    t = sim.start_s + 3600
    pages = [metrics_page(sim, node, t) for node in range(len(sim.hardware.node_host))]
    copies = max(1, round(gpus / 1024))
    text = "".join(p.replace('Hostname="node-', f'Hostname="c{k}-node-')
                   .replace('hostname="node-', f'hostname="c{k}-node-')
                   .replace('UUID="GPU-', f'UUID="GPU-{k:02d}')
                   for k in range(copies) for p in pages)
    return pages[0], text, t * 1000


def ours_vs_client(text: str, scrape_ms: int) -> dict:
    t_ours, parsed = best_of(lambda: parse_exposition(text, scrape_ms=scrape_ms))
    t_client, n_client = best_of(lambda: sum(len(f.samples) for f in text_string_to_metric_families(text)))
    return {"ours_s": t_ours, "client_s": t_client, "samples": parsed.samples.height, "client_samples": n_client}


def scrape_ingest(text: str, scrape_ms: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "w.duckdb"
        with warehouse.open_writer(path, publish=False):
            pass  # create + migrate outside the timing
        t0 = time.perf_counter()
        parsed = parse_exposition(text, scrape_ms=scrape_ms)
        t1 = time.perf_counter()
        wide = long_to_wide(parsed.samples)
        t2 = time.perf_counter()
        with warehouse.open_writer(path, publish=False) as con:
            con.execute("BEGIN TRANSACTION")
            new = store_wide(con, wide, cluster="bench", source="scrape")
            con.execute("COMMIT")
        t3 = time.perf_counter()
    return {"lines": parsed.samples.height, "devices": wide.height, "new": new, "parse_s": t1 - t0,
            "clean_s": t2 - t1, "write_s": t3 - t2, "total_s": t3 - t0}


def prometheus_backfill(gpus: int, hours: float) -> dict:
    sys.path.insert(0, str(ROOT))
    from tests.helpers.prometheus_rig import PrometheusRig, have_prometheus

    if not have_prometheus():
        return {"skipped": "prometheus/promtool not installed"}
    start = (datetime.utcnow() - timedelta(days=2)).replace(minute=0, second=0, microsecond=0)  # noqa: DTZ003
    sim = build_cluster(seed=9, gpus=gpus, start=start, days=hours / 24)
    with tempfile.TemporaryDirectory() as tmp:
        om = Path(tmp) / "history.om"
        with open(om, "w") as fh:
            raw = write_openmetrics(sim, fh, sim.start_s, sim.end_s)
        with PrometheusRig(Path(tmp) / "prom", [], history_file=om) as prom:
            path = Path(tmp) / "w.duckdb"
            t = time.perf_counter()
            stats = backfill(prom.url, sim.start, sim.end, step_s=30, chunk_s=3600, warehouse_path=path)
            elapsed = time.perf_counter() - t
    devices_steps = stats.samples_new
    week_1024 = 1024 * 7 * 86400 / 30  # device-steps (MIG instances count as devices; ~1 per GPU here)
    per_device_step = elapsed / max(1, devices_steps)
    return {"gpus": gpus, "devices": sim.hardware.n_devices, "hours": hours, "raw_points": raw,
            "chunks": stats.chunks_done, "rows": devices_steps, "points": stats.points, "elapsed_s": elapsed,
            "rows_per_s": devices_steps / elapsed, "week_1024_est_s": week_1024 * per_device_step}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", type=int, default=10240)
    ap.add_argument("--backfill-gpus", type=int, default=64)
    ap.add_argument("--backfill-hours", type=float, default=6.0)
    ap.add_argument("--skip-backfill", action="store_true")
    args = ap.parse_args()
    print(f"polars threads: {pl.thread_pool_size()}")
    node_page, batch, scrape_ms = exposition_batch(args.gpus)
    node = ours_vs_client(node_page, scrape_ms)
    print(f"parser, one 8-GPU node page ({node['samples']} samples): ours {node['ours_s'] * 1e3:.2f} ms, "
          f"prometheus_client {node['client_s'] * 1e3:.2f} ms ({node['client_s'] / node['ours_s']:.1f}x)")
    whole = ours_vs_client(batch, scrape_ms)
    print(f"parser, {args.gpus} GPUs ({whole['samples']} samples, {len(batch) / 1e6:.1f} MB): "
          f"ours {whole['ours_s']:.2f} s, prometheus_client {whole['client_s']:.2f} s "
          f"({whole['client_s'] / whole['ours_s']:.1f}x)")
    ing = scrape_ingest(batch, scrape_ms)
    print(f"scrape ingest, {args.gpus} GPUs: {ing['lines']} lines -> {ing['devices']} device rows: "
          f"parse {ing['parse_s']:.2f} s + clean {ing['clean_s']:.2f} s + write {ing['write_s']:.2f} s "
          f"= {ing['total_s']:.2f} s (budget 15 s)")
    if not args.skip_backfill:
        bf = prometheus_backfill(args.backfill_gpus, args.backfill_hours)
        if "skipped" in bf:
            print(f"backfill skipped: {bf['skipped']}")
        else:
            print(f"prometheus backfill, {bf['gpus']} GPUs ({bf['devices']} devices) x {bf['hours']} h at 30 s: "
                  f"{bf['rows']} rows ({bf['points']} points) in {bf['elapsed_s']:.1f} s = {bf['rows_per_s']:.0f} rows/s; "
                  f"a week of 1,024 GPUs at this rate: {bf['week_1024_est_s'] / 60:.0f} min")


if __name__ == "__main__":
    main()
