"""`make bench`: which benchmark scripts to run, each as its own process (so a peak RSS is that
script's alone), and how their JSON lands in bench/results.json.

Every script follows one contract: `--json OUT` writes its figures to OUT. A part that fails (exit
status, no JSON, a timeout) is recorded with the tail of its output and the others still run; a
partial run (`--sizes`, `--only`) replaces only the sections it measured, and every section keeps
the command, date, commit and load average of the run that produced it (`sources`)."""

from __future__ import annotations

import collections
import json
import os
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from harness_context import Context, HarnessError, dataset, dataset_ready, rel
from harness_inputs import dashboard_inputs
from machine import git_commit, load_average, machine, utc_now

PARTS = ["ingest", "analytics", "prometheus", "dashboard", "browser", "storage", "whatif"]
# optional scripts: run only when they accept --json (probed), else skipped with a note
OPTIONAL = {"storage": ["--part", "readers"], "whatif": []}
SIZES = [256, 1024, 4096]
REQUIRED = {
    "analytics": ["full_recompute_s", "incremental_s", "peak_rss_mib", "scan_floor_s"],
    "question": ["gpuledger_s", "prometheus_s", "agree"],
    "ingest": ["parse_samples_per_s_per_core", "write_samples_per_s_per_core"],
}


@dataclass
class Part:
    name: str                       # "analytics 1024": one entry of results["runs"]
    kind: str                       # one of PARTS
    script: Path
    args: list[str]                 # after the script, without --json
    store: Callable[[dict, dict, dict], list[str]]  # (results, data, source) -> sections filled
    prepare: Callable[[], list[str]] | None = None  # extra args found at run time (a warehouse)
    skip: str | None = None
    notes: list[str] = field(default_factory=list)


def accepts_json(ctx: Context, script: Path) -> bool:
    """Does the script take --json? Read its source first: a script that parses no arguments would
    run the whole benchmark on `--help`. Only then ask `--help` to be sure it parses."""
    if not script.exists() or "--json" not in script.read_text(errors="replace"):
        return False
    try:
        out = subprocess.run([ctx.python, str(script), "--help"], capture_output=True, text=True,
                             timeout=120, cwd=ctx.root, check=False)
    except subprocess.TimeoutExpired:
        return False
    return out.returncode == 0 and "--json" in out.stdout


# --- how each script's JSON lands in results.json --------------------------------------------

def _store_analytics(gpus: int):
    def store(results: dict, data: dict, source: dict) -> list[str]:
        results.setdefault("analytics", {})[str(gpus)] = data
        return [f"analytics/{gpus}"]
    return store


def _store_prometheus(results: dict, data: dict, source: dict) -> list[str]:
    sections = []
    for size, questions in (data.get("questions") or {}).items():
        results.setdefault("questions", {})[str(size)] = questions
        sections.append(f"questions/{size}")
    for size, info in (data.get("datasets") or {}).items():
        results.setdefault("prometheus_datasets", {})[str(size)] = info
        sections.append(f"prometheus_datasets/{size}")
    return sections


def _store_whole(key: str, size: int | None = None):
    def store(results: dict, data: dict, source: dict) -> list[str]:
        if size is None:
            results[key] = data
            return [key]
        results.setdefault(key, {})[str(size)] = data
        return [f"{key}/{size}"]
    return store


def _store_dashboard(gpus: int):
    def store(results: dict, data: dict, source: dict) -> list[str]:
        # the page figures sit directly under the size (results["dashboard"]["1024"][page]); what
        # describes the warehouse goes beside them in dashboard_warehouse
        results.setdefault("dashboard", {})[str(gpus)] = data.get("pages", data)
        extra = {k: v for k, v in data.items() if k != "pages"}
        if extra:
            results.setdefault("dashboard_warehouse", {})[str(gpus)] = extra
        return [f"dashboard/{gpus}"]
    return store


def _store_browser(results: dict, data: dict, source: dict) -> list[str]:
    """dashboard_browser_bench.py's JSON is keyed by size: results["browser"][size]."""
    sections = []
    for size, info in data.items():
        results.setdefault("browser", {})[str(size)] = info
        sections.append(f"browser/{size}")
    return sections


def problems(kind: str, data: dict) -> list[str]:
    """Keys the issue requires that the script's JSON lacks (kept, and shown as a warning)."""
    out = []
    if kind == "analytics":
        out = [f"missing {k}" for k in REQUIRED["analytics"] if k not in data]
    elif kind == "ingest":
        out = [f"missing {k}" for k in REQUIRED["ingest"] if k not in data]
    elif kind == "prometheus":
        if not data.get("questions"):
            out.append("no questions")
        for size, qs in (data.get("questions") or {}).items():
            for q, fig in qs.items():
                out += [f"{size}/{q}: missing {k}" for k in REQUIRED["question"] if k not in fig]
    elif kind == "dashboard" and not data.get("pages", data):
        out.append("no pages")
    elif kind == "browser":
        out = [f"{size}: no pages" for size, info in data.items() if not (info or {}).get("pages")] or \
            ([] if data else ["no sizes"])
    return out


# --- the plan ---------------------------------------------------------------------------------

def plan(ctx: Context, only: list[str], sizes: list[int], build_failed: dict[int, str] | None = None,
         building: list[int] = ()) -> list[Part]:
    """The parts to run, in order: ingest, analytics per size, the Prometheus comparison (it may
    leave the materialized warehouse the dashboards read), dashboards, then the optional ones.
    ``build_failed``: size -> why its week's build failed (harness_datasets), said in the skip;
    ``building``: sizes a dry run would build first (planned as built)."""
    build_failed = build_failed or {}

    def missing(n: int) -> str:
        why = build_failed.get(n)
        return f"its week's build failed: {why}" if why else f"{rel(dataset(ctx, n), ctx.root)}.done missing (dataset not built)"

    s = ctx.scripts_dir
    parts: list[Part] = []
    ready = [n for n in sizes if dataset_ready(ctx, n) or n in building]
    not_ready = [n for n in sizes if n not in ready]
    for kind in [k for k in PARTS if k in only]:
        if kind == "ingest":
            parts.append(Part("ingest", kind, s / "ingest_bench.py", [], _store_whole("ingest")))
        elif kind == "analytics":
            for n in sizes:
                parts.append(Part(
                    f"analytics {n}", kind, s / "analytics_bench.py",
                    ["--warehouse", rel(dataset(ctx, n), ctx.root)], _store_analytics(n),
                    skip=None if n in ready else missing(n)))
        elif kind == "prometheus":
            gpus_args = [a for n in ready for a in ("--gpus", str(n))]
            part = Part("prometheus", kind, s / "prometheus_bench.py", gpus_args, _store_prometheus,
                        skip=None if ready else "no dataset of the asked sizes is built")
            if not_ready:
                part.notes.append("sizes skipped, dataset not built: " + ", ".join(
                    f"{n} ({build_failed[n]})" if n in build_failed else str(n) for n in not_ready))
            parts.append(part)
        elif kind == "dashboard":
            n = ctx.dashboard_gpus
            part = Part(f"dashboard {n}", kind, s / "dashboard_bench.py", ["--gpus", str(n), "--reuse"], _store_dashboard(n))
            part.prepare = lambda part=part, n=n: dashboard_inputs(ctx, n, part.notes)
            parts.append(part)
        elif kind == "browser":
            # every page in Chromium per size; the script builds its own warehouses once
            # (data/bench/browser/w<N>, a week each) and reuses them after
            parts.append(Part("browser", kind, s / "dashboard_browser_bench.py",
                              ["--gpus", *map(str, sizes), "--folder", rel(ctx.data_dir / "browser", ctx.root)],
                              _store_browser))
        else:
            script = s / f"{kind}_bench.py"
            ok = accepts_json(ctx, script)
            parts.append(Part(kind, kind, script, OPTIONAL[kind], _store_whole(kind),
                              skip=None if ok else f"{script.name} {'absent' if not script.exists() else 'takes no --json yet'}"))
    for part in parts:
        part.args = [*part.args, *ctx.part_args.get(part.kind, [])]
        if part.skip is None and not part.script.exists():
            part.skip = f"{rel(part.script, ctx.root)} not found"
    return parts


def parse_part_args(items: list[str]) -> dict[str, list[str]]:
    """["prometheus=--days-4096 2", "analytics=--repeat 1"] -> {"prometheus": ["--days-4096", "2"], ...}:
    options handed to one part's script as they are (recorded in its command line)."""
    out: dict[str, list[str]] = {}
    for item in items:
        kind, sep, args = item.partition("=")
        if not sep or kind.strip() not in PARTS:
            raise ValueError(f"part arguments {item!r}: write PART=ARGS with PART one of {', '.join(PARTS)}, "
                             "e.g. 'prometheus=--days-4096 2'")
        out.setdefault(kind.strip(), []).extend(shlex.split(args))
    return out


# --- running one part -------------------------------------------------------------------------

def _pump(stream, name: str, tail: collections.deque, echo: Callable[[str], None]) -> None:
    for line in iter(stream.readline, ""):
        line = line.rstrip("\n")
        tail.append(line)
        echo(f"  [{name}] {line}")


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)  # the script and anything it started (a Prometheus server)
    except ProcessLookupError:
        pass


def run_part(ctx: Context, part: Part, results: dict) -> dict:
    """Run one part as a subprocess and merge its JSON into `results`. Returns its runs entry:
    name, command, date, commit, wall_s, rc, process_peak_rss_mib (that process only, from
    wait4), load_avg before/after, status ("ok", "failed", "skipped") and error / notes."""
    record = {"name": part.name, "date": utc_now(), "commit": git_commit(ctx.root)}
    if part.skip:
        ctx.echo(f"== {part.name}: skipped ({part.skip})")
        return {**record, "command": None, "rc": None, "status": "skipped", "error": part.skip}
    out = ctx.raw_dir / f"{part.name.replace(' ', '-')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    try:
        extra = part.prepare() if part.prepare else []
    except HarnessError as exc:
        ctx.echo(f"== {part.name}: failed before it ran: {exc}")
        return {**record, "command": None, "rc": None, "status": "failed", "error": str(exc),
                "notes": part.notes}
    argv = [ctx.python, str(part.script), *part.args, *extra, "--json", str(out)]
    command = shlex.join([rel(ctx.python, ctx.root), rel(part.script, ctx.root), *part.args, *extra,
                          "--json", rel(out, ctx.root)])
    record.update(command=command, load_avg_before=load_average())
    ctx.echo(f"== {part.name}: {command}  (load {record['load_avg_before']})")
    tail: collections.deque = collections.deque(maxlen=40)
    started = time.monotonic()
    proc = subprocess.Popen(argv, cwd=ctx.root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                            env={**os.environ, "PYTHONUNBUFFERED": "1"}, start_new_session=True)
    reader = threading.Thread(target=_pump, args=(proc.stdout, part.name, tail, ctx.echo), daemon=True)
    reader.start()
    timer = threading.Timer(ctx.timeout_s, _kill_group, args=(proc.pid,))
    timer.start()
    try:
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own rusage, not all children's
    except BaseException:  # Ctrl-C: the script runs in its own session, so the terminal's SIGINT
        _kill_group(proc.pid)  # does not reach it; stop it and what it started, then give up
        os.waitpid(proc.pid, 0)
        raise
    finally:
        timer.cancel()
    proc.returncode = os.waitstatus_to_exitcode(status)
    reader.join(timeout=10)
    wall = time.monotonic() - started
    record.update(wall_s=round(wall, 2), rc=proc.returncode, load_avg_after=load_average(),
                  process_peak_rss_mib=round(usage.ru_maxrss / 1024, 1))  # Linux: KiB
    if part.notes:
        record["notes"] = part.notes
    if proc.returncode != 0:
        timed_out = proc.returncode == -signal.SIGKILL and wall >= ctx.timeout_s
        why = f"timed out after {ctx.timeout_s:.0f} s" if timed_out else f"exit status {proc.returncode}"
        ctx.echo(f"== {part.name}: FAILED ({why}) after {wall:.1f} s")
        return {**record, "status": "failed", "error": why, "output_tail": list(tail)[-20:]}
    try:
        data = json.loads(out.read_text())
        problem = None if isinstance(data, dict) else "not a JSON object"
    except (OSError, ValueError) as exc:
        problem = str(exc)
    if problem:
        why = f"exit 0 but no usable JSON at {rel(out, ctx.root)}: {problem}"
        ctx.echo(f"== {part.name}: FAILED ({why})")
        return {**record, "status": "failed", "error": why, "output_tail": list(tail)[-20:]}
    warnings = problems(part.kind, data)
    box = ctx.machine or {}
    source = {**{k: record[k] for k in ("name", "command", "date", "commit", "load_avg_before", "wall_s")},
              "machine": {k: box.get(k) for k in ("cores", "memory_gib", "cpu")}}
    sections = part.store(results, data, source)
    for section in sections:
        results.setdefault("sources", {})[section] = source
    ctx.echo(f"== {part.name}: ok in {wall:.1f} s, peak RSS {record['process_peak_rss_mib']:,.0f} MiB"
             + (f"; warnings: {'; '.join(warnings)}" if warnings else ""))
    return {**record, "status": "ok", "sections": sections, **({"warnings": warnings} if warnings else {})}


def merge_runs(old: list[dict], new: list[dict]) -> list[dict]:
    """The latest attempt of each part, newest parts replacing older ones by name, order kept."""
    by_name = {r["name"]: r for r in old}
    for r in new:  # a part skipped now (dataset not built) keeps the record of its last good run
        if not (r["status"] == "skipped" and by_name.get(r["name"], {}).get("status") == "ok"):
            by_name[r["name"]] = r
    return list(by_name.values())


def header(ctx: Context, command: str) -> dict:
    ctx.machine = machine()
    return {"machine": ctx.machine, "date": utc_now(), "commit": git_commit(ctx.root), "command": command}
