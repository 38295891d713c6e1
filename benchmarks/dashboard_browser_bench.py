"""Dashboard pages as a person waits for them (issue 23): Debian's headless Chromium (Playwright)
against a real `streamlit run` server, timing each page from navigation to fully rendered (the
script run over, every chart drawn, every table drawn), with the bytes the browser received.

    .venv/bin/python benchmarks/dashboard_browser_bench.py --gpus 256 1024
    .venv/bin/python benchmarks/dashboard_browser_bench.py --gpus 1024 --reuse --json OUT

Per size it builds (or, with --reuse, reads) ``data/bench/browser/w<N>/gpuledger.duckdb`` the way a
user does: `gpuledger simulate warehouse --gpus N --days 7 --seed 42 --interval S` (S = --interval,
default 300 s: the pages read the hourly tables the pipelines materialize, so the sample interval
changes the build's time, not what a page reads), `gpuledger pipelines run-once`, `gpuledger
enforce plan`. Then one server per size (cache TTL 60 s, as deployed) and, per page:

* first load: a fresh browser profile (nothing cached) opening the page for the first time since
  the server started (its queries not cached yet; the warehouse state shared by every page is);
* repeat: the same tab reloading the page (--repeats times, median): the browser's cache and the
  server's cache warm, what a user clicking around within the minute sees.

Bytes: HTTP bodies as sent (encoded) plus the WebSocket frames the server pushed (the page's data);
"data bytes" is the WebSocket part. The machine's load average is printed beside the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
sys.path.insert(0, str(ROOT))
PAGES = ["utilization", "fair-share", "budgets", "chargeback", "squatters", "my-team", "enforcement", "what-if"]

# Rendered: the script run is over, a title is drawn, nothing is stale or a skeleton, and every chart
# and table has drawn its canvas or SVG.
RENDERED = """() => {
  const app = document.querySelector('[data-testid=stApp]');
  if (!app || app.getAttribute('data-test-script-state') !== 'notRunning') return false;
  if (!document.querySelector('h1')) return false;
  if (document.querySelector('[data-testid=stSkeleton], [data-stale=true]')) return false;
  for (const c of document.querySelectorAll('[data-testid=stVegaLiteChart]'))
    if (!c.querySelector('svg.marks, canvas.marks')) return false;
  for (const t of document.querySelectorAll('[data-testid=stDataFrame]'))
    if (!t.querySelector('canvas')) return false;
  return true;
}"""


def _cli(env: dict, *args: str) -> float:
    started = time.monotonic()
    subprocess.run([str(BIN / "gpuledger"), *args], env=env, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return time.monotonic() - started


def build(folder: Path, gpus: int, interval: int) -> dict[str, float]:
    (folder / "dagster").mkdir(parents=True, exist_ok=True)
    (folder / "dagster" / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    env = _env(folder)
    return {"simulate": _cli(env, "simulate", "warehouse", "--gpus", str(gpus), "--days", "7", "--seed", "42",
                             "--interval", str(interval)),
            "pipelines run-once": _cli(env, "pipelines", "run-once"),
            "enforce plan": _cli(env, "enforce", "plan")}


def _env(folder: Path, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPULEDGER_", "STREAMLIT_"))}
    return {**env, "GPULEDGER_WAREHOUSE": str(folder / "gpuledger.duckdb"), "DAGSTER_HOME": str(folder / "dagster"),
            "NO_COLOR": "1", **extra}


class Meter:
    """Bytes a page received, from Chrome's own network events (CDP)."""

    def __init__(self, context, page):
        self.http = self.ws = 0
        cdp = context.new_cdp_session(page)
        cdp.send("Network.enable")
        cdp.on("Network.loadingFinished", lambda e: self._http(e))
        cdp.on("Network.webSocketFrameReceived", lambda e: self._ws(e))

    def _http(self, event):
        self.http += int(event.get("encodedDataLength") or 0)

    def _ws(self, event):
        frame = event["response"]
        data = frame.get("payloadData") or ""
        self.ws += len(data) * 3 // 4 if frame.get("opcode") == 2 else len(data.encode())  # binary frames: base64

    def reset(self):
        self.http = self.ws = 0


def _load(page, meter: Meter, url: str | None, deadline_s: float = 120) -> tuple[float, int, int]:
    meter.reset()
    started = time.monotonic()
    if url is None:
        page.reload(wait_until="commit")
    else:
        page.goto(url, wait_until="commit")
    # the previous run's "notRunning" must not count: wait for this navigation's app to exist first
    page.wait_for_function(RENDERED, timeout=deadline_s * 1000, polling=25)
    elapsed = time.monotonic() - started
    time.sleep(0.3)  # frames still in flight belong to this load
    return elapsed, meter.http, meter.ws


def serve(folder: Path, whatif_dir: Path | None):
    from tests.helpers.dashboard_rig import free_port, wait_http

    cwd = Path(tempfile.mkdtemp(prefix="gpuledger-browser-bench-"))
    (cwd / ".streamlit").mkdir()
    shutil.copy(ROOT / ".streamlit" / "config.toml", cwd / ".streamlit" / "config.toml")
    port = free_port()
    env = _env(folder, GPULEDGER_WHATIF_DIR=str(whatif_dir or cwd / "no-whatif"))
    log = open(cwd / "streamlit.log", "w")  # noqa: SIM115 - lives as long as the server
    proc = subprocess.Popen([str(BIN / "streamlit"), "run", str(ROOT / "dashboards" / "app.py"), "--server.headless",
                             "true", "--server.port", str(port), "--server.address", "127.0.0.1",
                             "--server.fileWatcherType", "none"], cwd=cwd, env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    wait_http(f"http://127.0.0.1:{port}/_stcore/health", 120, proc)
    return proc, f"http://127.0.0.1:{port}", cwd


def time_pages(url: str, repeats: int, shots: Path | None) -> dict[str, dict]:
    from playwright.sync_api import sync_playwright

    out = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", headless=True,
                                    args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
        # the shared reads (warehouse state, config) once, as any earlier visitor would have
        warm = browser.new_context(viewport={"width": 1400, "height": 1000})
        page = warm.new_page()
        page.goto(f"{url}/utilization?warmup=1", wait_until="commit")
        page.wait_for_function("() => document.querySelector('h1')", timeout=180_000)
        warm.close()
        for name in PAGES:
            context = browser.new_context(viewport={"width": 1400, "height": 1000})
            page = context.new_page()
            meter = Meter(context, page)
            first = _load(page, meter, f"{url}/{name}")
            if name != "what-if" and not page.locator("[data-testid=stMetric]").count():  # a page that says what to run is no figure
                raise SystemExit(f"{name}: no figures drawn: {page.locator('[data-testid=stMain]').inner_text()[:300]}")
            again = [_load(page, meter, None) for _ in range(repeats)]
            if shots is not None:
                page.screenshot(path=str(shots / f"{name}.png"), full_page=True)
            context.close()
            out[name] = {"first_load_s": round(first[0], 3), "first_http_bytes": first[1], "first_data_bytes": first[2],
                         "repeat_s": round(statistics.median(a[0] for a in again), 3),
                         "repeat_runs_s": [round(a[0], 3) for a in again],
                         "repeat_http_bytes": int(statistics.median(a[1] for a in again)),
                         "repeat_data_bytes": int(statistics.median(a[2] for a in again))}
            r = out[name]
            print(f"| {name} | {r['first_load_s']:.2f} | {r['repeat_s']:.2f} | "
                  f"{(r['first_http_bytes'] + r['first_data_bytes']) / 1e6:.2f} | {r['repeat_data_bytes'] / 1e3:,.0f} |",
                  flush=True)
        browser.close()
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, nargs="+", default=[256, 1024])
    parser.add_argument("--folder", type=Path, default=ROOT / "data" / "bench" / "browser")
    parser.add_argument("--interval", type=int, default=300, help="simulated sample interval (s) of a build")
    parser.add_argument("--reuse", action="store_true", help="time the warehouses already built under --folder")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--whatif-dir", type=Path, default=None, help="a folder with a whatif schedule result")
    parser.add_argument("--screenshots", type=Path, default=None, help="a folder for each page's screenshot")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    results = {}
    for gpus in args.gpus:
        folder = (args.folder / f"w{gpus}").resolve()
        steps = {}
        if not args.reuse:
            shutil.rmtree(folder, ignore_errors=True)
            steps = build(folder, gpus, args.interval)
        proc, url, cwd = serve(folder, args.whatif_dir)
        shots = None
        if args.screenshots is not None:
            shots = args.screenshots / f"w{gpus}"
            shots.mkdir(parents=True, exist_ok=True)
        try:
            load = os.getloadavg()
            print(f"\n{gpus} GPUs ({folder}), load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}\n")
            print("| page | first load (s) | repeat, median (s) | first load, bytes (MB) | repeat, data (kB) |\n"
                  "|---|---:|---:|---:|---:|")
            pages = time_pages(url, args.repeats, shots)
            results[str(gpus)] = {"build_s": {k: round(v, 1) for k, v in steps.items()}, "pages": pages,
                                  "load_before": load, "load_after": os.getloadavg()}
            print(f"\nload average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        finally:
            proc.terminate()
            proc.wait(20)
            shutil.rmtree(cwd, ignore_errors=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
