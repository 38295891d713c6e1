"""Peak memory of parsing and ingesting one large ``/metrics`` page (not a test; issue 36).

A page of ~``--page-mib`` MiB (the simulator's 1,024-GPU node pages, copied with distinct hosts and
UUIDs as benchmarks/ingest_bench.py's ``exposition_batch`` does; 125 MiB = 30,720 GPUs, just under
the scrape's 128 MiB cap) is read three ways, each in a fresh process:

* ``parse``: ``parse_exposition`` alone; the peak RSS above the process holding the page
  (``VmHWM`` after resetting it, less ``VmRSS`` before), so the page itself is not counted;
* ``ingest``: ``ingest_page`` into a fresh warehouse (parse, wide rows, one transaction), counted
  the same way; ``rounds``: the same page ingested again three times, 30 s later each (a scraper's
  steady rounds: label caches filled, devices known), the largest of their peaks above the process
  before each;
* ``round``: ``--round-gpus`` GPUs of node pages (~32 kB each) as ``gpuledger ingest scrape``
  writes a round (``ingest_results``: pages in batches), four rounds into one warehouse;
* ``scrape``: the real CLI, ``gpuledger ingest scrape`` of the page served by a loopback HTTP
  server, peak RSS of the whole process by ``/usr/bin/time -v`` (the fetch, the decode, the
  interpreter and its libraries included).

Each with the page read in pieces (``exposition.pieces.PIECE_CHARS``, the default) and read whole
(one piece of the whole page: how every page was parsed before issue 36), in the same run.

    nice -n 10 .venv/bin/python benchmarks/exposition_memory_bench.py --page-mib 125
"""

from __future__ import annotations

import argparse
import http.server
import re
import subprocess
import sys
import tempfile
import threading
import time
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MIB = 2**20
WHOLE = 2**40  # PIECE_CHARS for "read whole": one piece holds any page


def _status(key: str) -> int:
    return int(next(line for line in open("/proc/self/status") if line.startswith(key)).split()[1]) * 1024


def child(mode: str, page_file: Path, piece_chars: int) -> None:
    """In a fresh process: read the page, reset the peak, parse or ingest it; print the peak above."""
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gc

    from gpuledger import warehouse
    from gpuledger.ingest.metrics.exposition import parse_exposition, pieces
    from gpuledger.ingest.metrics.scrape import ingest_page

    pieces.PIECE_CHARS = piece_chars
    text = page_file.read_text()
    scrape_ms = int(page_file.with_suffix(".ms").read_text())
    gc.collect()
    start = _status("VmRSS")  # the page read, nothing parsed yet
    highest = [start]

    def measured(work) -> tuple[int, float, int]:
        """(peak above the process before ``work``, seconds, samples)."""
        gc.collect()
        before = _status("VmRSS")
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
        began = time.perf_counter()
        samples = work()
        highest.append(_status("VmHWM"))
        return highest[-1] - before, time.perf_counter() - began, samples

    if mode == "parse":
        peak, took, samples = measured(lambda: parse_exposition(text, scrape_ms=scrape_ms).sample_count)
    elif mode == "round":  # the page's node pages as `ingest scrape` writes a round: batches of pages
        from ingest_bench import _pages_of

        from gpuledger.ingest.metrics.scrape import FetchResult, ingest_results
        pages = _pages_of(text)
        del text
        with tempfile.TemporaryDirectory() as tmp, warehouse.open_writer(Path(tmp) / "w.duckdb") as con:
            def round_of(ms: int) -> int:
                results = [FetchResult(f"http://n{k}/metrics", p, ms, 1) for k, p in enumerate(pages)]
                return ingest_results(con, results, cluster="bench").samples_parsed

            peak, took, samples = measured(lambda: round_of(scrape_ms))
            peaks = [measured(lambda k=k: round_of(scrape_ms + 30_000 * k)) for k in range(1, 4)]
            took = max(t for _, t, _ in peaks)
    else:
        with tempfile.TemporaryDirectory() as tmp, warehouse.open_writer(Path(tmp) / "w.duckdb") as con:
            def ingest(ms: int) -> int:
                return ingest_page(con, text, location="http://bench/metrics", scrape_ms=ms,
                                   cluster="bench").samples_parsed

            peak, took, samples = measured(lambda: ingest(scrape_ms))
            if mode == "rounds":  # the next rounds of a scraper: caches filled, devices known
                peaks = [measured(lambda k=k: ingest(scrape_ms + 30_000 * k)) for k in range(1, 4)]
                peak, took = max(p for p, _, _ in peaks), max(t for _, t, _ in peaks)
    # the step's own peak, and the highest the process ever was above the page held
    print(f"{peak / MIB:.0f} {took:.2f} {samples} {(max(highest) - start) / MIB:.0f}")


def run_child(mode: str, page_file: Path, piece_chars: int) -> tuple[float, float, int, float]:
    done = subprocess.run([sys.executable, __file__, "--child", mode, str(page_file), str(piece_chars)],
                          capture_output=True, text=True, cwd=ROOT, check=True)
    peak, took, samples, highest = done.stdout.split()
    return float(peak), float(took), int(samples), float(highest)


def run_scrape(folder: Path, page_file: Path, piece_chars: int) -> tuple[float, float, str]:
    """(peak RSS MiB of the whole CLI process, wall seconds, its round line) for one scrape of the
    page from a loopback server; ``piece_chars`` through a sitecustomize on the child's path."""
    hook = folder / f"hook{piece_chars}"
    hook.mkdir(exist_ok=True)
    (hook / "sitecustomize.py").write_text(
        "from gpuledger.ingest.metrics.exposition import pieces\n"
        f"pieces.PIECE_CHARS = {piece_chars}\n")
    handler = partial(http.server.SimpleHTTPRequestHandler, directory=str(page_file.parent))
    handler.log_message = lambda *a, **k: None  # type: ignore[attr-defined]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    warehouse_file = folder / f"scrape{piece_chars}.duckdb"
    try:
        began = time.monotonic()
        done = subprocess.run(
            ["/usr/bin/time", "-v", sys.executable, "-m", "gpuledger.cli", "ingest", "scrape",
             f"http://127.0.0.1:{server.server_address[1]}/{page_file.name}", "--timeout", "300",
             "--cluster", "bench", "-w", str(warehouse_file)],
            capture_output=True, text=True, cwd=ROOT, env={**__import__("os").environ, "PYTHONPATH": str(hook)})
        took = time.monotonic() - began
    finally:
        server.shutdown()
        warehouse_file.unlink(missing_ok=True)
    if done.returncode != 0:
        raise SystemExit(f"ingest scrape exited {done.returncode}: {done.stderr[-2000:]}")
    peak = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)[1]) / 1024
    said = next((line for line in done.stderr.splitlines() if line.startswith("round ")), "")
    return peak, took, said.strip()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--page-mib", type=float, default=125, help="page size in MiB (whole 1,024-GPU copies)")
    parser.add_argument("--round-gpus", type=int, default=10240,
                        help="GPUs of the round of node pages measured as `ingest scrape` writes it (0: skip)")
    parser.add_argument("--child", nargs=3, metavar=("MODE", "PAGE", "PIECE_CHARS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], Path(args.child[1]), int(args.child[2]))
        return
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from ingest_bench import exposition_batch

    from gpuledger.ingest.metrics.exposition import pieces

    copies = max(1, round(args.page_mib / 4.19))  # a 1,024-GPU copy of the page is ~4.19 MiB
    _, text, scrape_ms = exposition_batch(copies * 1024)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        page_file = folder / "metrics.txt"  # (served as text/plain)
        page_file.write_text(text)
        page_file.with_suffix(".ms").write_text(str(scrape_ms))
        size = len(text)
        del text
        print(f"page: {size / MIB:.1f} MiB, {copies * 1024:,} GPUs; pieces of {pieces.PIECE_CHARS / MIB:.0f} Mi "
              f"characters vs whole", flush=True)
        for mode in ("parse", "ingest", "rounds"):
            for label, piece in (("whole", WHOLE), ("pieces", pieces.PIECE_CHARS)):
                peak, took, samples, highest = run_child(mode, page_file, piece)
                print(f"{mode:6s} {label:6s}: peak {peak:5.0f} MiB above the process before "
                      f"({peak * MIB / size:.2f}x the page), {took:.2f} s, {samples:,} samples; the process at "
                      f"most {highest:.0f} MiB above the page held", flush=True)
        if args.round_gpus:
            _, text, scrape_ms = exposition_batch(args.round_gpus)
            round_file = folder / "round.txt"
            round_file.write_text(text)
            round_file.with_suffix(".ms").write_text(str(scrape_ms))
            for label, piece in (("whole", WHOLE), ("pieces", pieces.PIECE_CHARS)):
                peak, took, samples, highest = run_child("round", round_file, piece)
                print(f"round  {label:6s}: {len(text) / MIB:.0f} MiB of node pages ({args.round_gpus:,} GPUs) as "
                      f"`ingest scrape` writes a round: the first round {peak:.0f} MiB above the process before, "
                      f"four rounds at most {highest:.0f} MiB; {samples:,} samples a round", flush=True)
            del text
        for label, piece in (("whole", WHOLE), ("pieces", pieces.PIECE_CHARS)):
            peak, took, said = run_scrape(folder, page_file, piece)
            print(f"scrape {label:6s}: peak RSS {peak:5.0f} MiB (the whole CLI process), {took:.1f} s; {said}",
                  flush=True)


if __name__ == "__main__":
    main()
