"""Ingestion benchmarks (not a test): DCGM scrape throughput, parser comparison, Prometheus backfill.

    POLARS_MAX_THREADS=1 .venv/bin/python benchmarks/ingest_bench.py [--gpus 10240] [--skip-backfill]
    .venv/bin/python benchmarks/ingest_bench.py --backfill-only [--backfill-gpus 1024 --backfill-hours 3]
    .venv/bin/python benchmarks/ingest_bench.py --backfill-only --backfill-url http://127.0.0.1:9090 \
        --backfill-start 2026-11-27T00:00:00 --backfill-hours 6 --backfill-gpus 1024   # a loaded server

1. Scrape ingest of one scrape round of ~10,000 GPUs' exposition text (parse + clean + write into a
   fresh warehouse, one transaction) against the 15 s budget (a 30 s collect interval, half of it).
2. Our line-tolerant parser vs ``prometheus_client.parser.text_string_to_metric_families`` on the same
   text: one 8-GPU node page, and the whole batch.
3. Prometheus backfill: a real Prometheus loaded with simulated history (promtool blocks), backfilled
   through the HTTP API; the rate is extrapolated to a week of 1,024 GPUs at 30 s. Run it WITHOUT
   taskset / POLARS_MAX_THREADS=1: the target is "on this 2-core box, Prometheus on the same box", and
   the backfill overlaps Prometheus, JSON decoding and DuckDB writes on both cores.

Run the scrape part with POLARS_MAX_THREADS=1 (and ideally `taskset -c 0`) for the one-core figure.
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

from gpuledger import warehouse  # noqa: E402
from gpuledger.ingest.metrics.writes import store_wide  # noqa: E402
from gpuledger.ingest.metrics.exposition import long_to_wide, parse_exposition  # noqa: E402
from gpuledger.ingest.metrics.prometheus.backfill import backfill  # noqa: E402
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
        with warehouse.open_writer(path):
            pass  # create + migrate outside the timing
        t0 = time.perf_counter()
        parsed = parse_exposition(text, scrape_ms=scrape_ms)
        t1 = time.perf_counter()
        wide = long_to_wide(parsed.samples)
        t2 = time.perf_counter()
        with warehouse.open_writer(path) as con:
            with warehouse.transaction(con):
                new = store_wide(con, wide, cluster="bench", source="scrape")
        t3 = time.perf_counter()
    return {"lines": parsed.samples.height, "devices": wide.height, "new": new, "parse_s": t1 - t0,
            "clean_s": t2 - t1, "write_s": t3 - t2, "total_s": t3 - t0}


WEEK_STEPS = 7 * 86400 // 30  # grid points of a week at 30 s


def _backfill_figures(url: str, start: datetime, hours: float, *, workers: int, chunk_s: int) -> dict:
    commits: list[tuple[float, int]] = []  # (seconds since start, rows so far) at each chunk commit
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        stats = backfill(url, start, start + timedelta(hours=hours), step_s=30, chunk_s=chunk_s,
                         warehouse_path=Path(tmp) / "w.duckdb", workers=workers,
                         on_chunk=lambda b, n, s: commits.append((time.perf_counter() - t, s.samples_new)))
        elapsed = time.perf_counter() - t
    rows = stats.samples_new  # device rows: one per (GPU or MIG instance, 30 s step)
    devices = rows / (hours * 3600 / 30)
    # after the first commit (start-up: worker processes, first fetch + decode) the pipeline is full
    (t_first, rows_first), (t_last, rows_last) = commits[0], commits[-1]
    steady = (rows_last - rows_first) / (t_last - t_first) if len(commits) > 1 else rows / elapsed
    return {"hours": hours, "chunks": stats.chunks_done, "rows": rows, "points": stats.points,
            "devices": devices, "elapsed_s": elapsed, "rows_per_s": rows / elapsed,
            "points_per_s": stats.points / elapsed, "first_commit_s": t_first, "steady_rows_per_s": steady}


def prometheus_backfill(gpus: int, hours: float, *, workers: int, chunk_s: int) -> dict:
    sys.path.insert(0, str(ROOT))
    from tests.helpers.prometheus_rig import PrometheusRig, have_prometheus

    if not have_prometheus():
        return {"skipped": "prometheus/promtool not installed"}
    start = (datetime.utcnow() - timedelta(days=2)).replace(minute=0, second=0, microsecond=0)  # noqa: DTZ003
    sim = build_cluster(seed=9, gpus=gpus, start=start, days=hours / 24)
    with tempfile.TemporaryDirectory() as tmp:
        om = Path(tmp) / "history.om"
        t = time.perf_counter()
        with open(om, "w") as fh:
            raw = write_openmetrics(sim, fh, sim.start_s, sim.end_s)
        with PrometheusRig(Path(tmp) / "prom", [], history_file=om) as prom:
            om.unlink()
            load_s = time.perf_counter() - t
            out = _backfill_figures(prom.url, sim.start, hours, workers=workers, chunk_s=chunk_s)
    return {"gpus": gpus, "raw_points": raw, "load_s": load_s, **out}


def week_estimates(bf: dict, gpus: int) -> dict:
    """A week of 1,024 GPUs at 30 s at the measured rate, counted two ways: device rows with this
    simulation's MIG mix (devices per GPU as measured), and points (stored DCGM families per device:
    the simulator sends 12 families, 10 of them stored; a default dcgm-exporter's ~25 families also
    hold ~10 stored ones, the rest are not queried)."""
    devices_1024 = bf["devices"] * 1024 / gpus
    rows = devices_1024 * WEEK_STEPS
    points = rows * bf["points"] / max(1, bf["rows"])
    return {"devices_1024": devices_1024, "rows": rows, "points": points,
            "by_rows_s": rows / bf["rows_per_s"], "by_points_s": points / bf["points_per_s"],
            "gpu_rows_s": 1024 * WEEK_STEPS / bf["rows_per_s"],
            "steady_s": bf["first_commit_s"] + rows / bf["steady_rows_per_s"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", type=int, default=10240)
    ap.add_argument("--backfill-gpus", type=int, default=1024)
    ap.add_argument("--backfill-hours", type=float, default=3.0)
    ap.add_argument("--backfill-workers", type=int, default=2)
    ap.add_argument("--backfill-chunk", type=int, default=3600, help="seconds per chunk")
    ap.add_argument("--backfill-url", help="backfill from this already-loaded Prometheus instead")
    ap.add_argument("--backfill-start", help="UTC start of the history at --backfill-url (ISO)")
    ap.add_argument("--skip-backfill", action="store_true")
    ap.add_argument("--backfill-only", action="store_true")
    args = ap.parse_args()
    print(f"polars threads: {pl.thread_pool_size()}")
    if not args.backfill_only:
        scrape_benchmarks(args.gpus)
    if args.skip_backfill:
        return
    if args.backfill_url:
        bf = {"gpus": args.backfill_gpus, "load_s": float("nan"),
              **_backfill_figures(args.backfill_url, datetime.fromisoformat(args.backfill_start),
                                  args.backfill_hours, workers=args.backfill_workers,
                                  chunk_s=args.backfill_chunk)}
    else:
        bf = prometheus_backfill(args.backfill_gpus, args.backfill_hours, workers=args.backfill_workers,
                                 chunk_s=args.backfill_chunk)
    if "skipped" in bf:
        print(f"backfill skipped: {bf['skipped']}")
        return
    wk = week_estimates(bf, bf["gpus"])
    print(f"prometheus backfill, {bf['gpus']} GPUs ({bf['devices']:.0f} devices) x {bf['hours']} h at 30 s "
          f"(history generated + loaded in {bf['load_s']:.0f} s): {bf['rows']} rows ({bf['points']} points) "
          f"in {bf['chunks']} chunks, {bf['elapsed_s']:.1f} s = {bf['rows_per_s']:.0f} rows/s "
          f"({bf['points_per_s']:.0f} points/s)")
    print(f"a week of 1,024 GPUs at 30 s = {wk['rows'] / 1e6:.1f} M device rows "
          f"({wk['devices_1024']:.0f} devices incl. MIG), {wk['points'] / 1e6:.0f} M points: "
          f"{wk['by_rows_s'] / 60:.1f} min at this rate (counting 1,024 whole GPUs, "
          f"{1024 * WEEK_STEPS / 1e6:.1f} M rows: {wk['gpu_rows_s'] / 60:.1f} min)")
    print(f"first chunk committed after {bf['first_commit_s']:.1f} s, then {bf['steady_rows_per_s']:.0f} rows/s: "
          f"a week = {wk['steady_s'] / 60:.1f} min (start-up once + the steady rate)")


def scrape_benchmarks(gpus: int) -> None:
    node_page, batch, scrape_ms = exposition_batch(gpus)
    node = ours_vs_client(node_page, scrape_ms)
    print(f"parser, one 8-GPU node page ({node['samples']} samples): ours {node['ours_s'] * 1e3:.2f} ms, "
          f"prometheus_client {node['client_s'] * 1e3:.2f} ms ({node['client_s'] / node['ours_s']:.1f}x)")
    whole = ours_vs_client(batch, scrape_ms)
    print(f"parser, {gpus} GPUs ({whole['samples']} samples, {len(batch) / 1e6:.1f} MB): "
          f"ours {whole['ours_s']:.2f} s, prometheus_client {whole['client_s']:.2f} s "
          f"({whole['client_s'] / whole['ours_s']:.1f}x)")
    ing = scrape_ingest(batch, scrape_ms)
    print(f"scrape ingest, {gpus} GPUs: {ing['lines']} lines -> {ing['devices']} device rows: "
          f"parse {ing['parse_s']:.2f} s + clean {ing['clean_s']:.2f} s + write {ing['write_s']:.2f} s "
          f"= {ing['total_s']:.2f} s (budget 15 s)")


if __name__ == "__main__":
    main()
