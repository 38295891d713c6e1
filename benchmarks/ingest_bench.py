"""Ingestion benchmarks (not a test): exposition parsing and warehouse writes per core, the parser
against ``prometheus_client``, scrape rounds, Prometheus backfill.

    .venv/bin/python benchmarks/ingest_bench.py --json OUT        # what `make bench` runs (< 2 min)
    .venv/bin/python benchmarks/ingest_bench.py --skip-backfill   # the per-core figures, printed
    .venv/bin/python benchmarks/ingest_bench.py --backfill-only [--backfill-gpus 1024 --backfill-hours 3]
    .venv/bin/python benchmarks/ingest_bench.py --backfill-only --backfill-url http://127.0.0.1:9090 \
        --backfill-start 2026-11-27T00:00:00 --backfill-hours 6 --backfill-gpus 1024   # a loaded server

A *sample* is one metric value line of a dcgm-exporter page (one family x one device); a warehouse
row holds one device's stored fields at one time (the simulator sends 12 families per device, 10
stored; a default exporter ~25, the unstored ones only counted).

1. Per core (the process pins itself to CPU 0 and polars to one thread unless --no-pin; the
   backfill keeps both cores): samples/s of (a) parsing exposition text, ours and
   ``prometheus_client.parser.text_string_to_metric_families`` on the same text, (b) the warehouse
   write of the parsed result (wide rows + devices + samples + rollup + commit), (c) end to end,
   text -> committed rows. Pages: the simulator's ``metrics_page`` for every node of ``--gpus``
   GPUs, ingested as scrape rounds 30 s apart into one warehouse (round 1 registers the devices;
   the headline figures are the mean of the later, steady rounds: a sustained rate, checkpoints in), and the same pages widened to
   a default dcgm-exporter's ~25 families.
2. Prometheus backfill: a real Prometheus loaded with simulated history (promtool blocks), backfilled
   through the HTTP API; the rate is extrapolated to a week of 1,024 GPUs at 30 s. Not pinned: the
   target is "on this 2-core box, Prometheus on the same box". Skipped with --json unless --backfill.
"""

from __future__ import annotations

import os
import sys

# pin before polars is imported (its thread pool is sized at import)
_PIN = "--no-pin" not in sys.argv and "--backfill-only" not in sys.argv and (
    "--json" in sys.argv or "--skip-backfill" in sys.argv or "--pin" in sys.argv)
if _PIN:
    os.environ["POLARS_MAX_THREADS"] = "1"
    os.sched_setaffinity(0, {0})

import argparse
import functools
import json
import statistics
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import polars as pl
from prometheus_client.parser import text_string_to_metric_families

from gpuledger import warehouse
from gpuledger.ingest.metrics.exposition import parse_exposition, parse_exposition_lines, wide_rows
from gpuledger.ingest.metrics.exposition.bulk import clear_label_cache
from gpuledger.ingest.metrics.prometheus.backfill import backfill
from gpuledger.ingest.metrics.scrape import FetchResult, ingest_results
from gpuledger.ingest.metrics.writes import store_wide
from gpuledger.simulator import build_cluster, metrics_page, write_openmetrics


def best_of(fn, repeat: int = 3) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


@functools.lru_cache(maxsize=1)
def _node_pages() -> tuple[tuple[str, ...], int]:
    sim = build_cluster(seed=5, gpus=1024, start=datetime(2026, 11, 1), days=0.1)
    t = sim.start_s + 3600
    return tuple(metrics_page(sim, node, t) for node in range(len(sim.hardware.node_host))), t


def exposition_batch(gpus: int, *, with_pages: bool = False) -> tuple:
    """(one node page, one text holding every node's page for ~``gpus`` GPUs, scrape ms[, the node
    pages]). Built from a 1,024-GPU simulation (MIG, hpc_job copies, both host spellings), copied
    with distinct host names and UUIDs up to ``gpus`` (whole 1,024s, at least one)."""
    base, t = _node_pages()
    copies = max(1, round(gpus / 1024))
    pages = [p.replace('Hostname="node-', f'Hostname="c{k}-node-')
             .replace('hostname="node-', f'hostname="c{k}-node-')
             .replace('UUID="GPU-', f'UUID="GPU-{k:02d}')
             for k in range(copies) for p in base]
    text = "".join(pages)
    return (base[0], text, t * 1000, pages) if with_pages else (base[0], text, t * 1000)


# dcgm-exporter's default counters that the simulator does not send (default-counters.csv): a
# default page holds these too, ~25 families in all; none is stored, each is counted per line
EXTRA_DEFAULT_FAMILIES = (
    "DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_ENC_UTIL", "DCGM_FI_DEV_DEC_UTIL", "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "DCGM_FI_DEV_VGPU_LICENSE_STATUS",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_PROF_PCIE_TX_BYTES",
)


def default_exporter_page(page: str) -> str:
    """A simulator page widened to a default dcgm-exporter's family list: each extra family repeats
    the GPU_TEMP family's series with its own name and a small integer value."""
    lines = page.split("\n")
    temp = [ln for ln in lines if ln.startswith("DCGM_FI_DEV_GPU_TEMP{")]
    out = [page.rstrip("\n")]
    for k, family in enumerate(EXTRA_DEFAULT_FAMILIES):
        out.append(f"# HELP {family} {family} (default counter, not stored).")
        out.append(f"# TYPE {family} gauge")
        out.extend(f"{family}{{{ln[len('DCGM_FI_DEV_GPU_TEMP{'):ln.rindex('}')]}}} {k}" for ln in temp)
    return "\n".join(out) + "\n"


def sample_lines(text: str) -> int:
    """Samples in a page: its metric value lines (not comments, not blank)."""
    return sum(1 for ln in text.split("\n") if ln and ln[0] != "#")


def parse_rates(text: str, scrape_ms: int, *, client: bool = True, repeat: int = 3) -> dict:
    """samples/s of our parser (its first run, label cache empty, then the best of ``repeat``), of
    the per-line reference, and of prometheus_client (one run: it is ~50x slower) on the same text."""
    samples = sample_lines(text)
    clear_label_cache()  # the first parse reads every label set; later ones find them cached
    t_cold, _ = best_of(lambda: parse_exposition(text, scrape_ms=scrape_ms), 1)
    t_ours, parsed = best_of(lambda: parse_exposition(text, scrape_ms=scrape_ms), repeat)
    out = {"samples": samples, "kept": parsed.sample_count, "ours_s": t_ours, "ours_per_s": samples / t_ours,
           "cold_s": t_cold, "cold_per_s": samples / t_cold}
    t_lines, _ = best_of(lambda: parse_exposition_lines(text, scrape_ms=scrape_ms), 1)
    out.update(lines_s=t_lines, lines_per_s=samples / t_lines)
    if client:
        t_client, n_client = best_of(lambda: sum(len(f.samples) for f in text_string_to_metric_families(text)), 1)
        out.update(client_s=t_client, client_per_s=n_client / t_client, client_samples=n_client)
    return out


def scrape_rounds(text: str, scrape_ms: int, rounds: int) -> list[dict]:
    """Ingest ``text`` as ``rounds`` scrape rounds 30 s apart into one fresh warehouse, each round
    one ingest (parse, wide rows, devices, samples, rollup, commit) timed in its steps."""
    out = []
    samples = sample_lines(text)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "w.duckdb"
        with warehouse.open_writer(path):
            pass  # create + migrate outside the timing
        with warehouse.open_writer(path) as con:
            for r in range(rounds):
                ms = scrape_ms + r * 30_000
                c0, t0 = time.process_time(), time.perf_counter()
                parsed = parse_exposition(text, scrape_ms=ms)
                c1, t1 = time.process_time(), time.perf_counter()
                wide = wide_rows(parsed)
                t2 = time.perf_counter()
                with warehouse.transaction(con):
                    new = store_wide(con, wide, cluster="bench", source="scrape")
                c3, t3 = time.process_time(), time.perf_counter()
                out.append({"round": r + 1, "samples": samples, "rows": wide.height, "new": new,
                            "parse_s": t1 - t0, "wide_s": t2 - t1, "store_s": t3 - t2,
                            "write_s": t3 - t1, "total_s": t3 - t0,
                            # CPU seconds of this process (pinned: of its one core); under load the
                            # wall times above also hold the time other processes had the core
                            "parse_cpu_s": c1 - c0, "write_cpu_s": c3 - c1, "total_cpu_s": c3 - c0})
    return out


def per_page_round(pages: list[str], scrape_ms: int, rounds: int = 8) -> dict:
    """Rounds the way `gpuledger ingest scrape` writes them (``ingest_results``: every node page
    parsed on its own rules, the pages written in batches), after a first round that registered the
    devices; the mean of the ``rounds`` steady ones (checkpoints in, as in ``_steady``)."""
    samples = sum(sample_lines(p) for p in pages)
    seconds = []
    with tempfile.TemporaryDirectory() as tmp, warehouse.open_writer(Path(tmp) / "w.duckdb") as con:
        for r in range(rounds + 1):
            results = [FetchResult(f"http://n{k}/metrics", p, scrape_ms + r * 30_000, 1)
                       for k, p in enumerate(pages)]
            t = time.perf_counter()
            ingest_results(con, results, cluster="bench")
            seconds.append(time.perf_counter() - t)
    elapsed = statistics.fmean(seconds[1:])
    return {"pages": len(pages), "samples": samples, "rounds": rounds, "total_s": elapsed,
            "round_s": seconds, "per_s": samples / elapsed}


def _steady(rounds: list[dict], key: str) -> float:
    """Seconds per steady round, sustained: the mean of rounds 2.., so DuckDB's automatic
    checkpoint (40-60 ms every ~5th commit here) counts in the rate, as it does in a real scraper.
    (A median would hide it.)"""
    later = rounds[1:] or rounds
    return statistics.fmean(r[key] for r in later)


def ingest_figures(gpus: int, rounds: int, *, client: bool = True, exporter_gpus: int = 4096,
                   page_gpus: int = 10240) -> dict:
    """The per-core figures (module docstring, part 1)."""
    t = time.perf_counter()
    _, text, scrape_ms = exposition_batch(gpus)
    build_s = time.perf_counter() - t
    parse = parse_rates(text, scrape_ms, client=client)
    clear_label_cache()  # round 1 is a cold start: new devices, label sets not yet seen
    rs = scrape_rounds(text, scrape_ms, rounds)
    samples = rs[0]["samples"]
    parse_s, write_s, total_s = (_steady(rs, k) for k in ("parse_s", "write_s", "total_s"))
    _, ex_text, _ = exposition_batch(exporter_gpus)[:3]
    ex_text = "".join(default_exporter_page(p) for p in _pages_of(ex_text))
    ex_parse = parse_rates(ex_text, scrape_ms, client=client, repeat=2)
    clear_label_cache()
    ex_rounds = scrape_rounds(ex_text, scrape_ms, 5)
    _, _, _, round_pages = exposition_batch(page_gpus, with_pages=True)
    page_round = per_page_round(round_pages, scrape_ms)
    out = {
        "parse_samples_per_s_per_core": samples / parse_s,
        "write_samples_per_s_per_core": samples / write_s,
        "end_to_end_samples_per_s_per_core": samples / total_s,
        "samples": samples,
        "gpus": gpus,
        "devices": rs[0]["rows"],
        "pinned": _PIN,
        "end_to_end_samples_per_cpu_s": samples / _steady(rs, "total_cpu_s"),
        "parse_samples_per_cpu_s": samples / _steady(rs, "parse_cpu_s"),
        "write_samples_per_cpu_s": samples / _steady(rs, "write_cpu_s"),
        "steady_round_s": total_s,
        "steady_round_median_s": statistics.median(r["total_s"] for r in rs[1:] or rs),
        "steady_round_max_s": max(r["total_s"] for r in rs[1:] or rs),
        "first_round_s": rs[0]["total_s"],
        "parse_cold_samples_per_s_per_core": parse["cold_per_s"],
        "default_exporter_end_to_end_samples_per_s_per_core": ex_rounds[0]["samples"] / _steady(ex_rounds, "total_s"),
        "default_exporter_parse_samples_per_s_per_core": ex_rounds[0]["samples"] / _steady(ex_rounds, "parse_s"),
        "scrape_round_samples_per_s_per_core": page_round["per_s"],
        "details": {"build_s": build_s, "parse": parse, "rounds": rs, "default_exporter": {
            "gpus": exporter_gpus, "parse": ex_parse, "rounds": ex_rounds}, "per_page_round": page_round},
    }
    if client:
        out["prometheus_client_samples_per_s_per_core"] = parse["client_per_s"]
        out["ratio_vs_prometheus_client"] = parse["ours_per_s"] / parse["client_per_s"]
        out["ratio_vs_prometheus_client_cold"] = parse["cold_per_s"] / parse["client_per_s"]
        out["default_exporter_ratio_vs_prometheus_client"] = ex_parse["ours_per_s"] / ex_parse["client_per_s"]
    return out


def _pages_of(text: str) -> list[str]:
    """Split a batch text back into node pages (each starts with the first family's HELP line)."""
    marker = "# HELP DCGM_FI_DEV_SM_CLOCK "
    parts = text.split(marker)
    return [marker + p for p in parts[1:]]


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
    ap.add_argument("--gpus", type=int, default=10240, help="GPUs of the scrape text (whole 1,024s)")
    ap.add_argument("--rounds", type=int, default=16, help="scrape rounds ingested (the first registers devices)")
    ap.add_argument("--exporter-gpus", type=int, default=4096, help="GPUs of the default-exporter-shaped text")
    ap.add_argument("--page-gpus", type=int, default=10240, help="GPUs of the round of node pages (ingest_results)")
    ap.add_argument("--no-client", action="store_true", help="skip prometheus_client (slow: ~10x ours)")
    ap.add_argument("--json", type=Path, metavar="OUT", help="write the per-core figures as JSON to OUT "
                    "(pins itself to one core; the backfill is skipped unless --backfill)")
    ap.add_argument("--backfill", action="store_true", help="with --json: run the backfill part too")
    ap.add_argument("--pin", action="store_true", help="pin to CPU 0, polars on one thread (read at start)")
    ap.add_argument("--no-pin", action="store_true", help="do not pin (the default for --backfill-only)")
    ap.add_argument("--backfill-gpus", type=int, default=1024)
    ap.add_argument("--backfill-hours", type=float, default=3.0)
    ap.add_argument("--backfill-workers", type=int, default=2)
    ap.add_argument("--backfill-chunk", type=int, default=3600, help="seconds per chunk")
    ap.add_argument("--backfill-url", help="backfill from this already-loaded Prometheus instead")
    ap.add_argument("--backfill-start", help="UTC start of the history at --backfill-url (ISO)")
    ap.add_argument("--skip-backfill", action="store_true")
    ap.add_argument("--backfill-only", action="store_true")
    args = ap.parse_args()
    print(f"polars threads: {pl.thread_pool_size()}, pinned: {_PIN}, load average {os.getloadavg()[0]:.2f}")
    if not args.backfill_only:
        figures = ingest_figures(args.gpus, args.rounds, client=not args.no_client,
                                 exporter_gpus=args.exporter_gpus, page_gpus=args.page_gpus)
        print_figures(figures)
        if args.json:
            figures["command"] = " ".join(["benchmarks/ingest_bench.py", *sys.argv[1:]])
            figures["load_average_1m"] = os.getloadavg()[0]
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(figures, indent=2) + "\n")
            if not args.backfill:
                return
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


def print_figures(f: dict) -> None:
    d = f["details"]
    p, ex = d["parse"], d["default_exporter"]
    client = (f", prometheus_client {p['client_per_s'] / 1e6:.3f} M/s (ours {f['ratio_vs_prometheus_client']:.1f}x)"
              if "client_per_s" in p else "")
    print(f"parse, {f['gpus']} GPUs ({p['samples']} samples): ours {p['ours_per_s'] / 1e6:.2f} M/s "
          f"(best of 3, {p['ours_s'] * 1e3:.0f} ms; first parse, label cache empty: {p['cold_per_s'] / 1e6:.2f} M/s), "
          f"per-line reference {p['lines_per_s'] / 1e6:.3f} M/s{client}")
    for r in d["rounds"]:
        print(f"  round {r['round']}: {r['samples']} samples -> {r['rows']} rows ({r['new']} new): parse "
              f"{r['parse_s'] * 1e3:.0f} ms + wide {r['wide_s'] * 1e3:.0f} ms + store {r['store_s'] * 1e3:.0f} ms "
              f"= {r['total_s'] * 1e3:.0f} ms")
    print(f"steady rounds (mean of rounds 2..): parse {f['parse_samples_per_s_per_core'] / 1e6:.2f} M/s, "
          f"write {f['write_samples_per_s_per_core'] / 1e6:.2f} M/s, end to end "
          f"{f['end_to_end_samples_per_s_per_core'] / 1e6:.2f} M samples/s/core (target 1 M); per CPU second: "
          f"parse {f['parse_samples_per_cpu_s'] / 1e6:.2f} M, write {f['write_samples_per_cpu_s'] / 1e6:.2f} M, "
          f"end to end {f['end_to_end_samples_per_cpu_s'] / 1e6:.2f} M")
    ep = ex["parse"]
    client = (f", prometheus_client {ep['client_per_s'] / 1e6:.3f} M/s (ours {ep['ours_per_s'] / ep['client_per_s']:.1f}x)"
              if "client_per_s" in ep else "")
    print(f"default-exporter shape, {ex['gpus']} GPUs ({ep['samples']} samples, {len(EXTRA_DEFAULT_FAMILIES) + 12} "
          f"families): parse {ep['ours_per_s'] / 1e6:.2f} M/s{client}; end to end "
          f"{f['default_exporter_end_to_end_samples_per_s_per_core'] / 1e6:.2f} M/s")
    pr = d["per_page_round"]
    print(f"a scrape round as ingest_results writes it ({pr['pages']} node pages, {pr['samples']} samples): {pr['total_s']:.2f} s "
          f"= {pr['per_s'] / 1e6:.3f} M/s (mean of {pr['rounds']} steady rounds)")


if __name__ == "__main__":
    main()
