"""Dashboard pages as a person waits for them (issue 23): Debian's headless Chromium (Playwright)
against a real `streamlit run` server, timing each page from navigation to fully rendered (the
script run over, every chart drawn, every table drawn), with the bytes the browser received and
the CPU-seconds the browser and the server spent on it.

    .venv/bin/python benchmarks/dashboard_browser_bench.py --gpus 1024            # build if needed, time
    .venv/bin/python benchmarks/dashboard_browser_bench.py --gpus 4096 --build-only
    .venv/bin/python benchmarks/dashboard_browser_bench.py --gpus 256 1024 4096 --json OUT

Per size it builds (once: ``w<N>/build.json`` records a finished build; --rebuild builds again)
``data/bench/browser/w<N>/gpuledger.duckdb`` the way a user does: `gpuledger simulate warehouse
--gpus N --days 7 --seed 42 --interval S` (S = --interval, default 300 s: the pages read the
hourly tables the pipelines materialize, so the sample interval changes the build's time, not what
a page reads), `gpuledger pipelines run-once`, `gpuledger enforce plan`. Then one server per size
(cache TTL 60 s, as deployed) and, per page:

* first load: a fresh browser profile (nothing cached) opening the page for the first time since
  the server started (its queries not cached yet; the warehouse state shared by every page is);
* repeat: the same tab reloading the page (--repeats times, median): the browser's cache and the
  server's cache warm, what a user clicking around within the minute sees;
* menu click: from another page, clicking this page in the sidebar's menu (--repeats times, median):
  Streamlit switches pages over its open websocket without reloading the document, which is how
  a user moves between pages.

The machine is shared, so every pass also times a **baseline** in the same run: a trivial
Streamlit page (a title and one figure) on its own server, first load and repeat, before and after
the pages; each page's time is also given as a ratio to it. Beside the wall times: CPU-seconds of
the Chromium processes (browser, renderer, GPU/compositor: /proc, the whole process tree) and of
the Streamlit server during each load, the renderer's main-thread task time (Chrome's
Performance.getMetrics TaskDuration, of which ScriptDuration is JavaScript), and the load average.

Bytes: HTTP bodies as sent (encoded) plus the WebSocket frames the server pushed (the page's data);
"data bytes" is the WebSocket part.
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
CLK_TCK = os.sysconf("SC_CLK_TCK")

# Rendered: the script run is over, a title is drawn, nothing is stale or a skeleton, and every chart
# and table has drawn its canvas or SVG (a server-drawn chart: its component has put the SVG in; an
# <img> has loaded).
RENDERED = """() => {
  const app = document.querySelector('[data-testid=stApp]');
  if (!app || app.getAttribute('data-test-script-state') !== 'notRunning') return false;
  if (!document.querySelector('h1')) return false;
  if (document.querySelector('[data-testid=stSkeleton], [data-stale=true]')) return false;
  for (const c of document.querySelectorAll('[data-testid=stVegaLiteChart]'))
    if (!c.querySelector('svg.marks, canvas.marks')) return false;
  for (const c of document.querySelectorAll('[data-testid^=stBidiComponent]'))
    if (!c.querySelector('[data-testid=glChart] svg.marks')) return false;
  for (const t of document.querySelectorAll('[data-testid=stDataFrame]'))
    if (!t.querySelector('canvas')) return false;
  for (const i of document.querySelectorAll('[data-testid=stImage] img, [data-testid=stMarkdown] img'))
    if (!i.complete) return false;
  return true;
}"""

# The same-run floor: the least a Streamlit page costs here (its frontend, a websocket, a script run).
BASELINE_APP = """import streamlit as st
st.set_page_config(layout="wide")
st.title("Baseline")
st.metric("a figure", "1")
"""


# --- CPU-seconds from /proc -------------------------------------------------------------------------

def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, CPU-seconds of the process and of its reaped children)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2:].split()
    return int(fields[1]), sum(int(x) for x in fields[11:15]) / CLK_TCK  # ppid; utime stime cutime cstime


def tree_cpu_s(root: int, *, include_root: bool = True) -> float:
    """CPU-seconds of ``root``'s process tree: each live process's own and its reaped children's
    time (a child that exited is counted once, in the parent that reaped it)."""
    stats = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            found = _stat(int(entry))
            if found is not None:
                stats[int(entry)] = found
    keep, frontier = {root}, [root]
    while frontier:
        parent = frontier.pop()
        for pid, (ppid, _) in stats.items():
            if ppid == parent and pid not in keep:
                keep.add(pid)
                frontier.append(pid)
    if not include_root:
        keep.discard(root)
    return sum(stats[p][1] for p in keep if p in stats)


def _driver_pid() -> int:
    """The Playwright driver (node) this process started: Chromium runs under it."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        found = _stat(int(entry))
        if found and found[0] == os.getpid():
            try:
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if b"run-driver" in cmd:
                return int(entry)
    raise RuntimeError("the Playwright driver process was not found")


# --- building ---------------------------------------------------------------------------------------

def _cli(env: dict, *args: str) -> float:
    started = time.monotonic()
    subprocess.run(["nice", "-n", "10", str(BIN / "gpuledger"), *args], env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.monotonic() - started


def build(folder: Path, gpus: int, interval: int) -> dict:
    """The warehouse of ``gpus`` GPUs (a week), as a user builds one; ``build.json`` is written last."""
    shutil.rmtree(folder, ignore_errors=True)
    (folder / "dagster").mkdir(parents=True, exist_ok=True)
    (folder / "dagster" / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    env = _env(folder)
    load = os.getloadavg()
    steps = {"simulate": _cli(env, "simulate", "warehouse", "--gpus", str(gpus), "--days", "7", "--seed", "42",
                              "--interval", str(interval)),
             "pipelines run-once": _cli(env, "pipelines", "run-once"),
             "enforce plan": _cli(env, "enforce", "plan")}
    record = {"gpus": gpus, "interval_s": interval, "build_s": {k: round(v, 1) for k, v in steps.items()},
              "load_before": [round(x, 2) for x in load], "load_after": [round(x, 2) for x in os.getloadavg()],
              "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "niced": 10}
    (folder / "build.json").write_text(json.dumps(record, indent=2) + "\n")
    return record


def built(folder: Path, gpus: int, interval: int) -> dict | None:
    try:
        record = json.loads((folder / "build.json").read_text())
    except (OSError, ValueError):
        return None
    ok = record.get("gpus") == gpus and record.get("interval_s") == interval and (folder / "gpuledger.duckdb").exists()
    return record if ok else None


def _env(folder: Path, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPULEDGER_", "STREAMLIT_"))}
    return {**env, "GPULEDGER_WAREHOUSE": str(folder / "gpuledger.duckdb"), "DAGSTER_HOME": str(folder / "dagster"),
            "NO_COLOR": "1", **extra}


# --- serving and timing -----------------------------------------------------------------------------

class Meter:
    """What one load cost: bytes from Chrome's own network events (CDP), the renderer's main-thread
    time (CDP Performance), CPU-seconds of Chromium's processes and of the server (/proc)."""

    def __init__(self, context, page, driver: int, server_pid: int):
        self.http = self.ws = 0
        self.driver, self.server_pid = driver, server_pid
        self.cdp = context.new_cdp_session(page)
        self.cdp.send("Network.enable")
        self.cdp.send("Performance.enable")
        self.cdp.on("Network.loadingFinished", lambda e: self._http(e))
        self.cdp.on("Network.webSocketFrameReceived", lambda e: self._ws(e))

    def _http(self, event):
        self.http += int(event.get("encodedDataLength") or 0)

    def _ws(self, event):
        frame = event["response"]
        data = frame.get("payloadData") or ""
        self.ws += len(data) * 3 // 4 if frame.get("opcode") == 2 else len(data.encode())  # binary frames: base64

    def metrics(self) -> dict:
        return {m["name"]: m["value"] for m in self.cdp.send("Performance.getMetrics")["metrics"]}

    def start(self):
        self.http = self.ws = 0
        self._before = (tree_cpu_s(self.driver, include_root=False), tree_cpu_s(self.server_pid), self.metrics())

    def stop(self) -> dict:
        browser, server, before = self._before
        after = self.metrics()
        # a navigation starts the page's counters again: then the whole of `after` is this load's
        task = after["TaskDuration"] - (before["TaskDuration"] if after["TaskDuration"] >= before["TaskDuration"] else 0)
        script = after["ScriptDuration"] - (before["ScriptDuration"] if after["ScriptDuration"] >= before["ScriptDuration"] else 0)
        return {"browser_cpu_s": round(tree_cpu_s(self.driver, include_root=False) - browser, 3),
                "server_cpu_s": round(tree_cpu_s(self.server_pid) - server, 3),
                "renderer_task_s": round(task, 3), "renderer_script_s": round(script, 3),
                "http_bytes": self.http, "data_bytes": self.ws}


def _load(page, meter: Meter, url: str | None, deadline_s: float = 180) -> dict:
    meter.start()
    started = time.monotonic()
    if url is None:
        page.reload(wait_until="commit")
    else:
        page.goto(url, wait_until="commit")
    # the previous run's "notRunning" must not count: the navigation's new document is waited on
    page.wait_for_function(RENDERED, timeout=deadline_s * 1000, polling=25)
    elapsed = time.monotonic() - started
    time.sleep(0.3)  # frames still in flight belong to this load (not timed)
    return {"s": round(elapsed, 3), **meter.stop()}


def serve(app: Path, folder: Path | None, whatif_dir: Path | None):
    from tests.helpers.dashboard_rig import free_port, wait_http

    cwd = Path(tempfile.mkdtemp(prefix="gpuledger-browser-bench-"))
    (cwd / ".streamlit").mkdir()
    shutil.copy(ROOT / ".streamlit" / "config.toml", cwd / ".streamlit" / "config.toml")
    port = free_port()
    env = _env(folder or cwd, GPULEDGER_WHATIF_DIR=str(whatif_dir or cwd / "no-whatif"))
    log = open(cwd / "streamlit.log", "w")  # noqa: SIM115 - lives as long as the server
    proc = subprocess.Popen([str(BIN / "streamlit"), "run", str(app), "--server.headless",
                             "true", "--server.port", str(port), "--server.address", "127.0.0.1",
                             "--server.fileWatcherType", "none"], cwd=cwd, env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    wait_http(f"http://127.0.0.1:{port}/_stcore/health", 120, proc)
    return proc, f"http://127.0.0.1:{port}", cwd


def stop(proc, cwd: Path) -> None:
    proc.terminate()
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    shutil.rmtree(cwd, ignore_errors=True)


VIEWPORT = {"width": 1400, "height": 1000}


TITLES = {"utilization": "Utilization", "fair-share": "Fair share", "budgets": "Budgets", "chargeback": "Chargeback",
          "squatters": "Squatters", "my-team": "My team", "enforcement": "Enforcement", "what-if": "What-if"}


def _click(page, meter: Meter, title: str, deadline_s: float = 180) -> dict:
    """Click ``title`` in the sidebar's menu (Streamlit switches the page over its open websocket, no
    document reload) and wait until that page has rendered."""
    meter.start()
    started = time.monotonic()
    page.locator("[data-testid=stSidebarNav] a", has_text=title).first.click()
    page.wait_for_function(f"() => ({RENDERED})() && document.querySelector('h1').innerText.startsWith({json.dumps(title)})",
                           timeout=deadline_s * 1000, polling=25)
    elapsed = time.monotonic() - started
    time.sleep(0.3)
    return {"s": round(elapsed, 3), **meter.stop()}


def _median(runs: list[dict]) -> dict:
    return {k: (round(statistics.median(a[k] for a in runs), 3) if isinstance(runs[0][k], float)
                else int(statistics.median(a[k] for a in runs))) for k in runs[0]}


def time_one(browser, driver: int, server_pid: int, url: str, repeats: int, shot: Path | None = None,
             check=None, name: str | None = None) -> dict:
    """First load in a fresh profile, then ``repeats`` reloads of the same tab (median); for an app
    page (``name``) also ``repeats`` clicks from another page's menu entry to this one (median)."""
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    meter = Meter(context, page, driver, server_pid)
    first = _load(page, meter, url)
    if check is not None:
        check(page)
    again = [_load(page, meter, None) for _ in range(repeats)]
    if shot is not None:
        page.screenshot(path=str(shot), full_page=True)
    out = {"first": first, "repeat": _median(again), "repeat_runs_s": [a["s"] for a in again]}
    if name is not None:
        other = TITLES["what-if" if name != "what-if" else "squatters"]
        clicks = []
        for _ in range(repeats):
            _click(page, meter, other)
            clicks.append(_click(page, meter, TITLES[name]))
        out.update(click=_median(clicks), click_runs_s=[c["s"] for c in clicks])
    context.close()
    return out


def _figures_drawn(name: str):
    def check(page):
        if name != "what-if" and not page.locator("[data-testid=stMetric]").count():  # a "what to run" note is no figure
            raise SystemExit(f"{name}: no figures drawn: {page.locator('[data-testid=stMain]').inner_text()[:300]}")
    return check


def time_pages(url: str, server_pid: int, base_url: str, base_pid: int, pages: list[str], repeats: int,
               shots: Path | None, echo=print) -> dict:
    from playwright.sync_api import sync_playwright

    out: dict = {"pages": {}, "baseline": []}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", headless=True,
                                    args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
        driver = _driver_pid()
        # the shared reads (warehouse state, config) once, as any earlier visitor would have; and
        # the baseline server's first script run (its imports)
        for warm_url in (f"{url}/utilization?warmup=1", base_url):
            warm = browser.new_context(viewport=VIEWPORT)
            page = warm.new_page()
            page.goto(warm_url, wait_until="commit")
            page.wait_for_function("() => document.querySelector('h1')", timeout=300_000)
            warm.close()
        out["baseline"].append(time_one(browser, driver, base_pid, base_url, repeats))
        _row(echo, "baseline (before)", out["baseline"][-1])
        for name in pages:
            out["pages"][name] = r = time_one(browser, driver, server_pid, f"{url}/{name}", repeats,
                                              shots / f"{name}.png" if shots else None, _figures_drawn(name), name)
            _row(echo, name, r)
        out["baseline"].append(time_one(browser, driver, base_pid, base_url, repeats))
        _row(echo, "baseline (after)", out["baseline"][-1])
        browser.close()
    base_first = statistics.mean(b["first"]["s"] for b in out["baseline"])
    base_repeat = statistics.mean(b["repeat"]["s"] for b in out["baseline"])
    out["baseline_first_s"], out["baseline_repeat_s"] = round(base_first, 3), round(base_repeat, 3)
    for r in out["pages"].values():
        r["first_ratio"] = round(r["first"]["s"] / base_first, 2)
        r["repeat_ratio"] = round(r["repeat"]["s"] / base_repeat, 2)
        r["click_ratio"] = round(r["click"]["s"] / base_repeat, 2)
    return out


HEADER = ("| page | first (s) | repeat (s) | menu click (s) | first, browser / server CPU-s | repeat, browser / server "
          "CPU-s | click, browser / server CPU-s | repeat, renderer task / JS (s) | first, bytes (MB) | repeat, data (kB) |\n"
          "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")


def _row(echo, name: str, r: dict) -> None:
    f, a, c = r["first"], r["repeat"], r.get("click")
    click = (f"{c['s']:.2f}", f"{c['browser_cpu_s']:.2f} / {c['server_cpu_s']:.2f}") if c else ("–", "–")
    echo(f"| {name} | {f['s']:.2f} | {a['s']:.2f} | {click[0]} | {f['browser_cpu_s']:.2f} / {f['server_cpu_s']:.2f} | "
         f"{a['browser_cpu_s']:.2f} / {a['server_cpu_s']:.2f} | {click[1]} | {a['renderer_task_s']:.2f} / {a['renderer_script_s']:.2f} | "
         f"{(f['http_bytes'] + f['data_bytes']) / 1e6:.2f} | {a['data_bytes'] / 1e3:,.0f} |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, nargs="+", default=[256, 1024])
    parser.add_argument("--folder", type=Path, default=ROOT / "data" / "bench" / "browser")
    parser.add_argument("--interval", type=int, default=300, help="simulated sample interval (s) of a build")
    parser.add_argument("--rebuild", action="store_true", help="build the warehouses again even when built")
    parser.add_argument("--reuse", action="store_true", help="only time warehouses already built (never build)")
    parser.add_argument("--build-only", action="store_true", help="build what is missing, time nothing")
    parser.add_argument("--pages", nargs="+", default=PAGES, choices=PAGES, metavar="PAGE")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--whatif-dir", type=Path, default=None, help="a folder with a whatif schedule result")
    parser.add_argument("--screenshots", type=Path, default=None, help="a folder for each page's screenshot")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--first-visit", action="store_true",
                        help="time a fresh server's first visit against a later one instead (streamlit run vs "
                             "gpuledger dashboards serve: benchmarks/first_visit_bench.py), per size")
    args = parser.parse_args(argv)
    results = {}
    for gpus in args.gpus:
        folder = (args.folder / f"w{gpus}").resolve()
        record = None if args.rebuild else built(folder, gpus, args.interval)
        if record is None:
            if args.reuse:
                raise SystemExit(f"--reuse: {folder}/build.json missing (not built with --interval {args.interval}); "
                                 "run without --reuse to build it")
            print(f"building {folder} ({gpus} GPUs, a week, nice 10) ...", flush=True)
            record = build(folder, gpus, args.interval)
            print(f"built in {record['build_s']} s (load average {record['load_before']} → {record['load_after']})",
                  flush=True)
        else:  # a warehouse built by an earlier checkout: this code's schema first (readers never migrate)
            _cli(_env(folder), "warehouse", "migrate")
        if args.build_only:
            results[str(gpus)] = {"build": record}
            continue
        if args.first_visit:
            sys.path.insert(0, str(ROOT / "benchmarks"))
            from first_visit_bench import main as first_visits

            print(f"\n{gpus} GPUs ({folder}): a fresh server's first visit", flush=True)
            first_visits(["--warehouse", str(folder / "gpuledger.duckdb"), "--rounds", str(args.repeats)])
            continue
        proc, url, cwd = serve(ROOT / "dashboards" / "app.py", folder, args.whatif_dir)
        base_cwd = Path(tempfile.mkdtemp(prefix="gpuledger-browser-baseline-"))
        (base_cwd / "baseline.py").write_text(BASELINE_APP)
        base_proc, base_url, base_server_cwd = serve(base_cwd / "baseline.py", None, None)
        shots = None
        if args.screenshots is not None:
            shots = args.screenshots / f"w{gpus}"
            shots.mkdir(parents=True, exist_ok=True)
        try:
            load = os.getloadavg()
            print(f"\n{gpus} GPUs ({folder}), load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}\n\n{HEADER}",
                  flush=True)
            timed = time_pages(url, proc.pid, base_url, base_proc.pid, args.pages, args.repeats, shots,
                               echo=lambda line: print(line, flush=True))
            results[str(gpus)] = {"build": record, **timed, "load_before": [round(x, 2) for x in load],
                                  "load_after": [round(x, 2) for x in os.getloadavg()]}
            print(f"\nbaseline (a trivial page, same run): first {timed['baseline_first_s']:.2f} s, repeat "
                  f"{timed['baseline_repeat_s']:.2f} s; load average after: "
                  f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
        finally:
            stop(proc, cwd)
            stop(base_proc, base_server_cwd)
            shutil.rmtree(base_cwd, ignore_errors=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
