"""The first visitor after a restart (issue 37): a fresh dashboards server, a fresh browser opening
one page, against a later visitor (another fresh browser, the server now warm) — for `streamlit run`
(the server imports the pages' code and starts the chart renderer on the first visit) and for
`gpuledger dashboards serve` (warm before it listens), in one run, so the ratio is what compares.

    .venv/bin/python benchmarks/first_visit_bench.py --warehouse data/gpuledger.duckdb --rounds 3

Per round and server kind: start the server, time the first visit to --page until it is fully
rendered (dashboard_browser_bench.RENDERED), then a second visit in a new browser context, stop.
The server's start (until /_stcore/health answers) is timed apart: dashboards serve spends its warm-
up there, before any visitor waits.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from dashboard_browser_bench import RENDERED  # noqa: E402

from tests.helpers.dashboard_rig import free_port, wait_http  # noqa: E402

VIEWPORT = {"width": 1400, "height": 1000}


def start(kind: str, warehouse: Path, cwd: Path) -> tuple[subprocess.Popen, str, float]:
    port = free_port()
    env = {"GPULEDGER_WAREHOUSE": str(warehouse), "NO_COLOR": "1", "PATH": str(BIN) + ":/usr/bin:/bin"}
    if kind == "streamlit run":
        cmd = [str(BIN / "streamlit"), "run", str(ROOT / "dashboards" / "app.py"), "--server.headless", "true",
               "--server.port", str(port), "--server.address", "127.0.0.1", "--server.fileWatcherType", "none",
               "--browser.gatherUsageStats", "false"]
    else:
        cmd = [str(BIN / "gpuledger"), "dashboards", "serve", "--port", str(port), "-w", str(warehouse)]
    began = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                            start_new_session=True)
    wait_http(f"http://127.0.0.1:{port}/_stcore/health", 180, proc)
    return proc, f"http://127.0.0.1:{port}", time.monotonic() - began


def visit(browser, url: str) -> float:
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    began = time.monotonic()
    page.goto(url, wait_until="commit")
    page.wait_for_function(RENDERED, timeout=300_000, polling=100)
    took = time.monotonic() - began
    context.close()
    return took


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warehouse", type=Path, required=True)
    parser.add_argument("--page", default="utilization")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    from playwright.sync_api import sync_playwright

    runs: dict[str, list[dict]] = {"streamlit run": [], "dashboards serve": []}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", headless=True,
                                    args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
        for _ in range(args.rounds):
            for kind in runs:  # alternating, so load drifts hit both alike
                cwd = Path(tempfile.mkdtemp(prefix="gpuledger-first-visit-"))
                proc, url, started = start(kind, args.warehouse.resolve(), cwd)
                try:
                    first = visit(browser, f"{url}/{args.page}")
                    later = visit(browser, f"{url}/{args.page}")
                finally:
                    proc.terminate()
                    proc.wait(30)
                runs[kind].append({"start_s": round(started, 2), "first_s": round(first, 2), "later_s": round(later, 2),
                                   "ratio": round(first / later, 2)})
                print(kind, runs[kind][-1], flush=True)
        browser.close()
    print("\n| server | start until healthy (s) | first visit (s) | later visit (s) | first ÷ later |\n|---|---:|---:|---:|---:|")
    for kind, rs in runs.items():
        med = {k: statistics.median(r[k] for r in rs) for k in ("start_s", "first_s", "later_s", "ratio")}
        print(f"| {kind} | {med['start_s']:.2f} | {med['first_s']:.2f} | {med['later_s']:.2f} | {med['ratio']:.2f} "
              f"(rounds: {', '.join(str(r['ratio']) for r in rs)}) |")
    if args.json:
        args.json.write_text(json.dumps(runs, indent=2) + "\n")


if __name__ == "__main__":
    main()
