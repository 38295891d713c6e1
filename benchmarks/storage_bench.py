"""Storage benchmarks (not a test): the write path as history grows, and reader latency under writers.

    .venv/bin/python benchmarks/storage_bench.py                  # both parts, 256 GPUs, ~8 min
    .venv/bin/python benchmarks/storage_bench.py --part write     # 1 vs 7 days of history only
    .venv/bin/python benchmarks/storage_bench.py --part readers --seconds 120 --writer-every 30
    .venv/bin/python benchmarks/storage_bench.py --part parquet   # the alternative design, measured
    .venv/bin/python benchmarks/storage_bench.py --part simulate --sim-cells 200000,100000
    .venv/bin/python benchmarks/storage_bench.py --part readers --seconds 600 --writer-every 30 \
        --long-sizing both --json data/bench/storage/readers.json      # issue 9 §5 in full

1. Write path: one scrape round of every node's exposition page (256 GPUs = 302 devices incl. MIG),
   written as ``gpuledger ingest scrape`` writes it (``open_writer`` + ``ingest_results`` + close),
   into a warehouse holding 1 day and 7 days of simulated history. Reported per round: lock + open
   + migrate, ingest, close (DuckDB checkpoint), and what the old design added on top (a whole-file
   copy to ``<file>.snapshot``, timed with ``shutil.copyfile`` on the same file).
2. Readers: 4 reader processes querying in a loop (``open_reader`` + two dashboard-style queries),
   while a writer process writes a scrape round every ``--writer-every`` seconds, then while a long
   writer (a backfill-like session of chunks of 20,000-row batches that yields to readers; chunks
   of ``--long-chunk-s``, or cut to the writer's turn budget, ``--long-sizing``) runs. Latency =
   from asking for the reader to the last query's rows, p50 / p99 / max; of it, the time spent
   waiting for writers at the gate, and where that went: each reader's wait laid over the writer's
   recorded phases (drain, open, work, close, let_in; ``warehouse.db.writer_phases``).
3. ``--part simulate``: the same readers during ``write_simulation`` of the next day (a real long
   writer), once per ``--sim-cells`` chunk size.

Histories are simulated once and cached under data/bench/storage/ or $GPULEDGER_BENCH_CACHE
(``--gpus``, seed 1, start 2026-11-01); the readers part copies data/bench/week256.duckdb (the
bench datasets' 7-day 256-GPU week) when it is complete, never writing to it. ``--json OUT``
writes the figures (readers, long_writer, write_path, command) for benchmarks/harness.py. The
machine is shared: compare ratios within one run, and read the load averages it records.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpuledger import warehouse

START = datetime(2026, 11, 1)
CACHE = Path(os.environ.get("GPULEDGER_BENCH_CACHE", ROOT / "data" / "bench" / "storage"))  # own histories, scratch copies


def history(gpus: int, days: int) -> Path:
    """A cached warehouse with ``days`` of simulated history (built once)."""
    from gpuledger.simulator import build_cluster
    from gpuledger.simulator.to_warehouse import write_simulation

    path = CACHE / f"storage-{gpus}gpus-{days}d.duckdb"
    if not path.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".building")
        t = time.perf_counter()
        sim = build_cluster(seed=1, gpus=gpus, start=START, days=days)
        with warehouse.open_writer(tmp) as con:
            write_simulation(con, sim)
        for side in (".lock", ".gate", ".readers"):
            Path(f"{tmp}{side}").unlink(missing_ok=True)
        tmp.rename(path)
        print(f"built {path.name} in {time.perf_counter() - t:.0f} s", flush=True)
    return path


@functools.lru_cache(maxsize=2)
def _simulation(gpus: int, days: int):
    from gpuledger.simulator import build_cluster

    return build_cluster(seed=1, gpus=gpus, start=START, days=days)


def round_pages(gpus: int, days: int, round_no: int) -> list:
    """FetchResults of one scrape round just after the history ends (one page per node)."""
    from gpuledger.ingest.metrics.scrape import FetchResult
    from gpuledger.simulator import metrics_page

    sim = _simulation(gpus, days)
    t = sim.end_s + 30 * round_no
    return [FetchResult(url=f"http://node-{n}:9400/metrics", text=metrics_page(sim, n, t), scrape_ms=(t + 1) * 1000,
                        attempts=1) for n in range(len(sim.hardware.node_host))]


def write_round(path: Path, results) -> dict:
    from gpuledger.ingest.metrics.scrape import ingest_results

    t0 = time.perf_counter()
    with warehouse.open_writer(path) as con:
        t1 = time.perf_counter()
        stats = ingest_results(con, results, cluster="sim")
        t2 = time.perf_counter()
    t3 = time.perf_counter()
    return {"open_s": t1 - t0, "ingest_s": t2 - t1, "close_s": t3 - t2, "total_s": t3 - t0,
            "new": stats.samples_new}


def write_part(gpus: int, rounds: int) -> dict:
    """Rounds alternate between the two histories (1 d, 7 d, 1 d, ...), so load from other work on
    the machine falls on both alike; medians per history."""
    srcs = {days: history(gpus, days) for days in (1, 7)}
    pages = {days: [round_pages(gpus, days, r) for r in range(1, rounds + 1)] for days in srcs}
    out = {}
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        paths = {days: Path(tmp) / f"w{days}.duckdb" for days in srcs}
        for days, path in paths.items():
            shutil.copyfile(srcs[days], path)
            with warehouse.open_writer(path):
                pass  # page cache warm, migrations current: as a running ingest finds it
        figures = {days: [] for days in srcs}
        copies = {days: [] for days in srcs}
        for r in range(rounds):
            for days, path in paths.items():
                figures[days].append(write_round(path, pages[days][r]))
                t = time.perf_counter()  # what the old design added: the whole-file snapshot copy
                shutil.copyfile(path, Path(tmp) / "copy.snapshot")
                copies[days].append(time.perf_counter() - t)
        sizes = {days: path.stat().st_size for days, path in paths.items()}
    for days in srcs:
        f = figures[days]
        med = {k: statistics.median(x[k] for x in f) for k in ("open_s", "ingest_s", "close_s", "total_s")}
        out[days] = {**med, "max_total_s": max(x["total_s"] for x in f), "new": f[0]["new"],
                     "size_mb": sizes[days] / 1e6, "copy_s": statistics.median(copies[days])}
        r = out[days]
        print(f"{days} day(s) of history ({r['size_mb']:.0f} MB): round median {r['total_s'] * 1e3:.0f} ms "
              f"(open {r['open_s'] * 1e3:.0f} + ingest {r['ingest_s'] * 1e3:.0f} + close {r['close_s'] * 1e3:.0f}), "
              f"max {r['max_total_s'] * 1e3:.0f} ms, {r['new']} rows; the old snapshot copy would add "
              f"{r['copy_s'] * 1e3:.0f} ms", flush=True)
    ratio = out[7]["total_s"] / out[1]["total_s"]
    old_ratio = (out[7]["total_s"] + out[7]["copy_s"]) / (out[1]["total_s"] + out[1]["copy_s"])
    print(f"write path 7 d / 1 d: {ratio:.2f} (with the old whole-file copy: {old_ratio:.2f}); "
          f"copy alone 7 d / 1 d: {out[7]['copy_s'] / out[1]['copy_s']:.1f}", flush=True)
    return out


READ_QUERIES = (
    # hourly SM activity of the newest day (the dashboard's utilization chart) ...
    ("SELECT hour, sum(s_sm_active) / nullif(sum(s_n_sm_active), 0) FROM gpu_hourly "
     "WHERE hour >= (SELECT max(hour) FROM gpu_hourly) - INTERVAL 24 HOUR GROUP BY hour ORDER BY hour"),
    # ... and the newest 10 minutes of raw samples (what a freshness check reads)
    "SELECT count(*), max(ts) FROM gpu_samples WHERE ts >= (SELECT max(ts) FROM gpu_samples) - INTERVAL 10 MINUTE",
)


def reader_main(path: str, seconds: float, out: str, stop: str | None = None) -> None:
    """One reader process: query in a loop for ``seconds`` (or until the file ``stop`` exists);
    latencies (s) and errors to ``out``."""
    from gpuledger.warehouse.db import last_reader_wait_s, last_reader_wait_span

    lat, waits, opens, errors, spans = [], [], [], [], []
    end = time.monotonic() + seconds
    while time.monotonic() < end and not (stop and Path(stop).exists()):
        t0 = time.perf_counter()
        try:
            with warehouse.open_reader(path) as con:
                t1 = time.perf_counter()
                for q in READ_QUERIES:
                    con.execute(q).fetchall()
            t2 = time.perf_counter()
            lat.append(t2 - t0)
            waits.append(last_reader_wait_s())
            spans.append(last_reader_wait_span())  # (asked at, s behind writers at the gate, s for the file)
            opens.append(t1 - t0)
        except Exception as exc:  # noqa: BLE001 - counted, the benchmark's point
            errors.append(f"{type(exc).__name__}: {exc}")
        time.sleep(0.05)  # a dashboard refreshes, it does not spin
    Path(out).write_text(json.dumps({"latency_s": lat, "wait_s": waits, "open_s": opens, "errors": errors,
                                     "spans": spans}))


def scrape_writer_main(path: str, pages_file: str, seconds: float, every: float, out: str) -> None:
    import pickle

    holds = []
    started = time.monotonic()  # the readers started with this process
    pages = pickle.loads(Path(pages_file).read_bytes())  # made before the readers started
    t_next = started + every / 2
    end = started + seconds
    for results in pages:
        time.sleep(max(0.0, t_next - time.monotonic()))
        if time.monotonic() >= end:
            break
        if not holds:
            first = time.monotonic() - started
        holds.append(write_round(Path(path), results)["total_s"])
        t_next += every
    from gpuledger.warehouse.db import writer_phases

    Path(out).write_text(json.dumps({"holds_s": [round(h, 2) for h in holds],
                                     "first_write_after_s": round(first, 1) if holds else None,
                                     "phases": writer_phases()}))


def long_writer_main(path: str, seconds: float, out: str, chunk_s: float = 1.0, sizing: str = "budget") -> None:
    """A backfill-like writer: one session, chunks of 20,000-sample batches in one transaction
    each, yielding between chunks. ``sizing`` "fixed": every chunk lasts ``chunk_s`` (as the
    simulator's and the backfill's fixed-size chunks do); "budget": at most ``chunk_s``, cut to
    what is left of the writer's turn (``turn_left_s``) so readers queued at the turn's start
    get in within the budget."""
    import numpy as np
    import polars as pl
    from gpuledger.warehouse.db import writer_phases

    yields, chunks, batches, n = 0, 0, 0, 20_000
    batch_s, commit_s = [], []  # the last batches' and commits' durations: what to keep back
    t0 = np.datetime64("2027-01-01T00:00:00", "us")  # after the history: new rows, no conflicts
    end = time.monotonic() + seconds
    with warehouse.open_writer(path) as con:
        while time.monotonic() < end:
            span = chunk_s if sizing == "fixed" else min(chunk_s, con.turn_left_s() - max(commit_s, default=0.0))
            c_end = time.monotonic() + span
            with warehouse.transaction(con):  # a chunk: batches for ~span, one transaction
                while True:
                    b = time.monotonic()
                    warehouse.write_samples(con, pl.DataFrame({
                        "gpu_id": np.full(n, 1, dtype=np.int32),
                        "ts": t0 + (np.arange(n) + batches * n) * np.timedelta64(1, "s"),
                        "sm_active_ratio": np.linspace(0, 1, n)}), "bench")
                    batches += 1
                    batch_s = [*batch_s[-2:], time.monotonic() - b]
                    if time.monotonic() + (max(batch_s) if sizing == "budget" else 0.0) >= c_end:
                        break  # at least one batch per chunk: the writer always progresses
                c = time.monotonic()
            commit_s = [*commit_s[-2:], time.monotonic() - c]
            chunks += 1
            yields += con.yield_to_readers(after_s=min(1.0, chunk_s))
    Path(out).write_text(json.dumps({"chunks": chunks, "yields": yields, "batches": batches,
                                     "sizing": sizing, "phases": writer_phases()}))


def _pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


PHASE_NAMES = ("gate", "drain", "open", "work", "close", "let_in")


def attribute_waits(spans: list, phases: list, top: float = 0.99) -> dict:
    """Where the longest reader waits went: each wait at the gate, [asked, asked + gate s], is
    laid over the writer's phases (same monotonic clock across processes) and its overlap with
    each summed; "other" is what no phase covers (polling, the reader's own scheduling). For the
    waits at or above the ``top`` quantile, and for the longest one; milliseconds."""
    waits = sorted((s for s in spans if s), key=lambda s: s[1])
    if not waits:
        return {}
    cut = waits[min(len(waits) - 1, int(top * len(waits)))][1]

    def split(span):
        a, b = span[0], span[0] + span[1]
        parts = dict.fromkeys(PHASE_NAMES, 0.0)
        for name, p0, p1 in phases:
            parts[name] += max(0.0, min(b, p1) - max(a, p0))
        parts["other"] = max(0.0, (b - a) - sum(parts.values()))
        return parts

    tail = [split(s) for s in waits if s[1] >= cut and s[1] > 0]
    mean = {k: 1e3 * sum(t[k] for t in tail) / len(tail) for k in (*PHASE_NAMES, "other")} if tail else {}
    return {"top_quantile": top, "n": len(tail), "mean_ms_of_top": mean,
            "longest_ms": {k: 1e3 * v for k, v in split(waits[-1]).items()}, "longest_total_ms": 1e3 * waits[-1][1]}


def phase_stats(phases: list) -> dict:
    """Per writer phase: count, p50, max (ms); turns (gate taken to let go, close included)."""
    out = {}
    for name in PHASE_NAMES:
        d = sorted(p1 - p0 for n, p0, p1 in phases if n == name)
        if d:
            out[name] = {"n": len(d), "p50_ms": 1e3 * _pct(d, 0.5), "max_ms": 1e3 * d[-1]}
    return out


def _fmt_parts(parts: dict) -> str:
    return ", ".join(f"{k} {v:.0f}" for k, v in parts.items() if v >= 0.5) or "nothing"


def run_readers(path: Path, seconds: float, writer: list[str], tmp: Path, label: str, *,
                until_writer_done: bool = False) -> dict:
    """4 reader processes for ``seconds`` (or, ``until_writer_done``, until the writer process
    exits) beside one writer process; their figures, and where their waits went."""
    me = [sys.executable, str(Path(__file__).resolve())]
    stop = tmp / "stop" if until_writer_done else None
    if stop is not None:
        stop.unlink(missing_ok=True)
        seconds = 3600.0
    readers = [subprocess.Popen([*me, "--reader", str(path), str(seconds), str(tmp / f"r{i}.json"),
                                 *([str(stop)] if stop else [])], cwd=ROOT) for i in range(4)]
    w = subprocess.Popen([*me, *writer, str(tmp / "w.json")], cwd=ROOT)
    try:
        assert w.wait() == 0, f"benchmark process failed ({w.args})"
    finally:
        if stop is not None:
            stop.write_text("")  # the readers stop (also when the writer failed)
    for p in readers:
        assert p.wait() == 0, f"benchmark process failed ({p.args})"
    lat, waits, opens, errors, spans = [], [], [], [], []
    for i in range(4):
        r = json.loads((tmp / f"r{i}.json").read_text())
        lat += r["latency_s"]
        waits += r["wait_s"]
        opens += r["open_s"]
        errors += r["errors"]
        spans += r["spans"]
    w_out = json.loads((tmp / "w.json").read_text())
    phases = w_out.pop("phases", [])
    res = {"reads": len(lat), "errors": len(errors), "p50_ms": _pct(lat, 0.5) * 1e3, "p99_ms": _pct(lat, 0.99) * 1e3,
           "max_ms": max(lat) * 1e3 if lat else float("nan"), "wait_p99_ms": _pct(waits, 0.99) * 1e3,
           "wait_max_ms": max(waits) * 1e3 if waits else float("nan"), "open_p50_ms": _pct(opens, 0.5) * 1e3,
           "open_p99_ms": _pct(opens, 0.99) * 1e3, "seconds": seconds, "writer": w_out,
           "writer_phases": phase_stats(phases), "wait_split": attribute_waits(spans, phases)}
    print(f"{label}: {res['reads']} reads by 4 readers, {res['errors']} errors; latency p50 {res['p50_ms']:.0f} ms, "
          f"p99 {res['p99_ms']:.0f} ms, max {res['max_ms']:.0f} ms; of it waiting for writers: p99 "
          f"{res['wait_p99_ms']:.0f} ms, max {res['wait_max_ms']:.0f} ms; open_reader in all (wait + DuckDB "
          f"open + schema check): p50 {res['open_p50_ms']:.0f} ms, p99 {res['open_p99_ms']:.0f} ms; writer "
          f"{w_out}", flush=True)
    if phases:
        print("  writer phases (n, p50 / max ms): " + "; ".join(
            f"{k} {v['n']}, {v['p50_ms']:.0f} / {v['max_ms']:.0f}" for k, v in res["writer_phases"].items()), flush=True)
        split = res["wait_split"]
        if split:
            print(f"  the top 1 % of waits ({split['n']}), mean ms: {_fmt_parts(split['mean_ms_of_top'])}; the "
                  f"longest ({split['longest_total_ms']:.0f} ms): {_fmt_parts(split['longest_ms'])}", flush=True)
    if errors:
        print("  first error:", errors[0], flush=True)
    return res


LEAD_WEEK = ROOT / "data" / "bench" / "week256.duckdb"  # the lead's 7-day 256-GPU history: copied, never written


def week_source(gpus: int) -> Path:
    """The 7-day history the readers part copies: the lead's ready week256 (when complete) for
    256 GPUs, else one built here."""
    if gpus == 256 and Path(f"{LEAD_WEEK}.done").exists():
        return LEAD_WEEK
    return history(gpus, 7)


def _copy_warehouse(src: Path, dst: Path) -> None:
    shutil.copyfile(src, dst)
    if Path(f"{src}.wal").exists():
        shutil.copyfile(f"{src}.wal", f"{dst}.wal")


def _working_copy(src: Path, tmp: Path) -> Path:
    """``src`` copied into ``tmp`` as w.duckdb and opened once by a writer (migrated, WAL folded in),
    so the timed part starts from a settled file; the shared dataset is never written."""
    path = tmp / "w.duckdb"
    _copy_warehouse(src, path)
    with warehouse.open_writer(path):
        pass
    return path


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def readers_part(gpus: int, seconds: float, every: float, chunk_s: float = 1.0, sizing: str = "budget",
                 long_seconds: float = 60.0, baseline_seconds: float = 30.0) -> dict:
    out = {}
    src = week_source(gpus)
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp_name:
        tmp = Path(tmp_name)
        path = _working_copy(src, tmp)
        out["source"] = str(src.relative_to(ROOT) if src.is_relative_to(ROOT) else src)
        before = _load()
        out["baseline"] = run_readers(path, min(baseline_seconds, seconds), ["--idle-writer"], tmp,
                                      "no writer (baseline)")
        out["baseline"]["load_avg"] = {"before": before, "after": _load()}
        import pickle

        pages = tmp / "pages.pkl"  # the rounds' exposition pages, made outside the timed window
        pages.write_bytes(pickle.dumps([round_pages(gpus, 7, 100 + r) for r in range(int(seconds // every) + 1)]))
        before = _load()
        out["scrape"] = run_readers(
            path, seconds, ["--scrape-writer", str(path), str(pages), str(seconds), str(every)], tmp,
            f"a scrape round every {every:g} s for {seconds:g} s")
        out["scrape"]["writer_every_s"] = every
        out["scrape"]["load_avg"] = {"before": before, "after": _load()}
        print(f"  load average before / after: {before} / {out['scrape']['load_avg']['after']}", flush=True)
        for kind in (("fixed", "budget") if sizing == "both" else (sizing,)) if long_seconds > 0 else ():
            key = "long" if kind == sizing or kind == "budget" else "long_fixed"
            before = _load()
            out[key] = run_readers(path, long_seconds,
                                   ["--long-writer", str(path), str(long_seconds), str(chunk_s), kind], tmp,
                                   f"a long writer ({kind} chunks of at most {chunk_s:g} s, one session, "
                                   "yields between chunks)")
            out[key]["load_avg"] = {"before": before, "after": _load()}
            out[key]["sizing"] = kind
            print(f"  load average before / after: {before} / {out[key]['load_avg']['after']}", flush=True)
    return out


def parquet_part(gpus: int) -> dict:
    """The other design the issue allows: closed days of raw samples moved to daily Parquet files
    that DuckDB reads in place. Measured: exporting one day (the daily cost it adds), and a scan of
    the week from the table vs from the seven day files (best of 3 each)."""
    import duckdb

    src = history(gpus, 7)
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp_name:
        tmp = Path(tmp_name)
        con = duckdb.connect(str(src), read_only=True)
        days = [r[0] for r in con.execute(
            "SELECT DISTINCT CAST(ts AS DATE) AS d FROM gpu_samples ORDER BY d").fetchall()]
        exports = []
        for d in days:
            t = time.perf_counter()
            con.execute(f"COPY (SELECT * FROM gpu_samples WHERE ts >= DATE '{d}' AND ts < DATE '{d}' + 1 "
                        f"ORDER BY gpu_id, ts) TO '{tmp / f'day={d}.parquet'}' (FORMAT parquet)")
            exports.append(time.perf_counter() - t)
        scan = ("SELECT gpu_id, count(*), sum(sm_active_ratio), max(fb_used_bytes) FROM {src} "
                "GROUP BY gpu_id ORDER BY gpu_id")
        timings = {}
        for name, source in (("table", "gpu_samples"), ("parquet", f"read_parquet('{tmp}/day=*.parquet')")):
            best = float("inf")
            for _ in range(3):
                t = time.perf_counter()
                con.execute(scan.format(src=source)).fetchall()
                best = min(best, time.perf_counter() - t)
            timings[name] = best
        parquet_mb = sum(f.stat().st_size for f in tmp.glob("*.parquet")) / 1e6
        con.close()
    res = {"export_day_s": statistics.median(exports), "scan_table_s": timings["table"],
           "scan_parquet_s": timings["parquet"], "parquet_mb": parquet_mb}
    print(f"parquet: export of one day of raw samples {res['export_day_s'] * 1e3:.0f} ms (median of {len(exports)}); "
          f"scan of the week: table {res['scan_table_s'] * 1e3:.0f} ms, 7 day files {res['scan_parquet_s'] * 1e3:.0f} ms "
          f"({parquet_mb:.0f} MB of Parquet)", flush=True)
    return res


def sim_writer_main(path: str, gpus: int, days: float, cells: int, trace: str) -> None:
    """A real long writer, as ``gpuledger simulate warehouse`` writes: write_simulation with
    ``cells`` device x time cells per chunk (the cluster is built before the lock is taken, so the
    first chunk is a chunk); its writer phases to ``trace``."""
    from datetime import timedelta

    from gpuledger.warehouse.db import writer_phases

    from gpuledger.ledger.config_versions import config_for_command
    from gpuledger.simulator import build_cluster
    from gpuledger.simulator.to_warehouse import write_simulation

    with warehouse.open_reader(path) as con:  # the warehouse's stored config, as the command uses
        cfg, _ = config_for_command(con, None, write=False)
    sim = build_cluster(seed=1, gpus=gpus, start=START + timedelta(days=7), days=days, config=cfg)  # the week after
    with warehouse.open_writer(path) as con:
        write_simulation(con, sim, cells=cells)
    Path(trace).write_text(json.dumps({"cells": cells, "phases": writer_phases()}))


def simulate_part(gpus: int, days: float, cells_list: list[int]) -> dict:
    """Readers during a real long writer: the simulator writing ``days`` into a copy of the 7-day
    history (as ``simulate warehouse`` into an existing warehouse, the next week), with 4
    readers in a loop; once per chunk size in ``cells_list`` (write_simulation's ``cells``)."""
    from gpuledger.simulator.to_warehouse import CELLS_PER_CHUNK

    out = {}
    src = week_source(gpus)
    for cells in cells_list or [CELLS_PER_CHUNK]:
        with tempfile.TemporaryDirectory(dir=CACHE) as tmp_name:
            tmp = Path(tmp_name)
            path = _working_copy(src, tmp)
            before = _load()
            t0 = time.perf_counter()
            res = run_readers(path, 0, ["--sim-writer", str(path), str(gpus), str(days), str(cells)], tmp,
                              f"simulator writing {days:g} day(s) of {gpus} GPUs, {cells:,}-cell chunks",
                              until_writer_done=True)
            res["elapsed_s"] = time.perf_counter() - t0
            res["cells"] = cells
            res["load_avg"] = {"before": before, "after": _load()}
            print(f"  {res['elapsed_s']:.1f} s in all; load average before / after: {before} / "
                  f"{res['load_avg']['after']}", flush=True)
            out[str(cells)] = res
    return out


def main() -> None:
    if sys.argv[1:2] == ["--reader"]:
        return reader_main(sys.argv[2], float(sys.argv[3]), sys.argv[4], *sys.argv[5:6])
    if sys.argv[1:2] == ["--sim-writer"]:
        a = sys.argv[2:]
        return sim_writer_main(a[0], int(a[1]), float(a[2]), int(a[3]), a[4])
    if sys.argv[1:2] == ["--scrape-writer"]:
        a = sys.argv[2:]
        return scrape_writer_main(a[0], a[1], float(a[2]), float(a[3]), a[4])
    if sys.argv[1:2] == ["--long-writer"]:
        a = sys.argv[2:]
        return long_writer_main(a[0], float(a[1]), a[4], float(a[2]), a[3])
    if sys.argv[1:2] == ["--idle-writer"]:
        return Path(sys.argv[2]).write_text(json.dumps({}))
    ap = argparse.ArgumentParser()
    ap.add_argument("--part", choices=["write", "readers", "parquet", "simulate", "both"], default="both")
    ap.add_argument("--gpus", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=8, help="scrape rounds timed per history length")
    ap.add_argument("--seconds", type=float, default=120.0, help="reader run length")
    ap.add_argument("--writer-every", type=float, default=30.0, help="seconds between scrape rounds")
    ap.add_argument("--long-chunk-s", type=float, default=1.0, help="(longest) chunk of the long writer")
    ap.add_argument("--long-sizing", choices=["budget", "fixed", "both"], default="budget",
                    help="long writer chunks cut to the turn budget left, or always --long-chunk-s, or "
                         "both one after the other (fixed first)")
    ap.add_argument("--long-seconds", type=float, default=60.0, help="long writer run length (0: none)")
    ap.add_argument("--sim-days", type=float, default=1.0, help="days the simulate part writes")
    ap.add_argument("--sim-cells", type=lambda v: [int(x) for x in v.split(",")], default=[],
                    help="simulate part: write_simulation chunk sizes to compare, e.g. 200000,100000")
    ap.add_argument("--json", metavar="OUT", help="write the figures as JSON to OUT")
    args = ap.parse_args()
    CACHE.mkdir(parents=True, exist_ok=True)
    result = {"command": " ".join(["benchmarks/storage_bench.py", *sys.argv[1:]]), "gpus": args.gpus}
    if args.part in ("write", "both"):
        result["write_path"] = write_part(args.gpus, args.rounds)
    if args.part in ("readers", "both"):
        r = readers_part(args.gpus, args.seconds, args.writer_every, args.long_chunk_s, args.long_sizing,
                         args.long_seconds)
        result["readers"] = r["scrape"]
        result["readers_baseline"] = r["baseline"]
        result["history"] = r["source"]
        if "long" in r:
            result["long_writer"] = {**r["long"], "chunk_s": args.long_chunk_s}
        if "long_fixed" in r:
            result["long_writer_fixed"] = {**r["long_fixed"], "chunk_s": args.long_chunk_s}
    if args.part == "parquet":
        result["parquet"] = parquet_part(args.gpus)
    if args.part == "simulate":
        result["simulate"] = simulate_part(args.gpus, args.sim_days, args.sim_cells)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=1, default=str) + "\n")


if __name__ == "__main__":
    main()
