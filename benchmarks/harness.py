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
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from machine import git_commit, load_average, machine, utc_now

PARTS = ["ingest", "analytics", "prometheus", "dashboard", "storage", "whatif"]
# optional scripts: run only when they accept --json (probed), else skipped with a note
OPTIONAL = {"storage": ["--part", "readers"], "whatif": []}
SIZES = [256, 1024, 4096]
DASHBOARD_GPUS = 1024
# the Prometheus helper's copy of week1024 after `gpuledger pipelines run-once`
PROM_MATERIALIZED = "prom/week{gpus}-materialized.duckdb"
REQUIRED = {
    "analytics": ["full_recompute_s", "incremental_s", "peak_rss_mib", "scan_floor_s"],
    "question": ["gpuledger_s", "prometheus_s", "agree"],
    "ingest": ["parse_samples_per_s_per_core", "write_samples_per_s_per_core"],
}


class HarnessError(Exception):
    """A part could not be prepared (dataset missing, materialization failed): one line."""


@dataclass
class Context:
    root: Path                      # the repository (commands are recorded relative to it)
    scripts_dir: Path               # where the *_bench.py scripts are
    data_dir: Path                  # data/bench: weekN.duckdb(.done), prom/, harness/
    raw_dir: Path                   # each script's JSON output
    python: str = sys.executable
    gpuledger: str = str(Path(sys.executable).parent / "gpuledger")
    timeout_s: float = 3 * 3600
    dashboard_gpus: int = DASHBOARD_GPUS
    part_args: dict[str, list[str]] = field(default_factory=dict)  # extra options per part
    echo: Callable[[str], None] = print


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


def rel(path: Path | str, root: Path) -> str:
    """A path as the command line that reproduces a figure should spell it: relative to the repo."""
    p = Path(os.path.abspath(path))  # not resolve(): .venv/bin/python is a symlink out of the repo
    try:
        return str(p.relative_to(os.path.abspath(root)))
    except ValueError:
        return str(p)


def dataset(ctx: Context, gpus: int) -> Path:
    return ctx.data_dir / f"week{gpus}.duckdb"


def dataset_ready(ctx: Context, gpus: int) -> bool:
    """The background build writes weekN.duckdb.done once the file is complete."""
    return (ctx.data_dir / f"week{gpus}.duckdb.done").exists()


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
    return out


# --- the dashboard's warehouse ----------------------------------------------------------------

def _missing_migrations(path: Path) -> list[int] | None:
    """Migrations this code ships that the file lacks (readers refuse such a file); None when it
    cannot be read now."""
    import duckdb
    from gpuledger.warehouse.db import migrations

    try:
        con = duckdb.connect(str(path), read_only=True)
    except duckdb.Error:
        return None
    try:
        done = {r[0] for r in con.execute("SELECT version FROM schema_migrations").fetchall()}
    except duckdb.Error:
        done = set()
    finally:
        con.close()
    return [v for v, _, _ in migrations() if v not in done]


def _gpuledger(ctx: Context, env: dict, *args: str) -> None:
    cmd = [ctx.gpuledger, *args]
    ctx.echo(f"  $ {shlex.join([rel(c, ctx.root) if '/' in c else c for c in cmd])}")
    out = subprocess.run(cmd, env=env, cwd=ctx.root, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        tail = (out.stderr or out.stdout).strip().splitlines()[-5:]
        raise HarnessError(f"`gpuledger {' '.join(args)}` failed (exit {out.returncode}): {' / '.join(tail)}")


def dashboard_warehouse(ctx: Context, gpus: int, notes: list[str]) -> Path:
    """A materialized copy of weekN for the dashboards (they read the pipelines' tables): the
    Prometheus bench's copy when it is complete (its build writes FILE.done last) and on this
    code's schema; else our own under data/bench/harness/, made once per dataset build
    (copy, `pipelines run-once`, `enforce plan`) and migrated before each use. The shared
    datasets are never written."""
    theirs = ctx.data_dir / PROM_MATERIALIZED.format(gpus=gpus)
    if theirs.exists() and Path(f"{theirs}.done").exists():
        if _missing_migrations(theirs) == []:
            notes.append(f"warehouse: {rel(theirs, ctx.root)} (the Prometheus bench's materialized copy)")
            return theirs
        notes.append(f"{rel(theirs, ctx.root)} lacks migrations of this code; using the harness's own copy")
    source, source_done = dataset(ctx, gpus), ctx.data_dir / f"week{gpus}.duckdb.done"
    if not source_done.exists():
        raise HarnessError(f"{rel(source, ctx.root)} is not built yet ({rel(source_done, ctx.root)} missing)")
    folder = ctx.data_dir / "harness"
    ours, ours_done = folder / f"week{gpus}-materialized.duckdb", folder / f"week{gpus}-materialized.duckdb.done"
    env = {**os.environ, "GPULEDGER_WAREHOUSE": str(ours), "DAGSTER_HOME": str(folder / "dagster"), "NO_COLOR": "1"}
    env.pop("GPULEDGER_CONFIG", None)
    if ours_done.exists() and ours_done.read_text() == source_done.read_text() and ours.exists():
        _gpuledger(ctx, env, "migrate")
        notes.append(f"warehouse: {rel(ours, ctx.root)} (copy of {rel(source, ctx.root)}, materialized earlier)")
        return ours
    (folder / "dagster").mkdir(parents=True, exist_ok=True)
    ours_done.unlink(missing_ok=True)
    for suffix in ("", ".wal"):
        Path(f"{ours}{suffix}").unlink(missing_ok=True)
        if Path(f"{source}{suffix}").exists():
            shutil.copyfile(f"{source}{suffix}", f"{ours}{suffix}")
    ctx.echo(f"  materializing a copy of {rel(source, ctx.root)} for the dashboards (once per dataset)")
    _gpuledger(ctx, env, "pipelines", "run-once")
    _gpuledger(ctx, env, "enforce", "plan")
    ours_done.write_text(source_done.read_text())
    notes.append(f"warehouse: {rel(ours, ctx.root)} (copy of {rel(source, ctx.root)}, then "
                 "`gpuledger pipelines run-once` and `gpuledger enforce plan`)")
    return ours


def whatif_result(ctx: Context, warehouse: Path, gpus: int, notes: list[str]) -> Path | None:
    """A folder holding `gpuledger whatif schedule --json` of the warehouse's week, for the what-if
    page (it draws such a file); made once per warehouse build. None, with a note, when it fails:
    the other pages are still timed."""
    folder = ctx.data_dir / "harness" / f"whatif{gpus}"
    result, marker = folder / "schedule.json", folder / "schedule.json.source"
    built = Path(f"{warehouse}.done")
    stamp = f"{warehouse}\n{built.read_text() if built.exists() else warehouse.stat().st_mtime}"
    if result.exists() and marker.exists() and marker.read_text() == stamp:
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    result.unlink(missing_ok=True)
    env = {**os.environ, "GPULEDGER_WAREHOUSE": str(warehouse), "NO_COLOR": "1"}
    env.pop("GPULEDGER_CONFIG", None)
    try:
        _gpuledger(ctx, env, "whatif", "schedule", "--no-progress", "--json", str(result))
    except HarnessError as exc:
        notes.append(f"what-if page not timed: {exc}")
        return None
    if not result.exists():
        notes.append(f"what-if page not timed: `gpuledger whatif schedule` wrote no {rel(result, ctx.root)}")
        return None
    marker.write_text(stamp)
    return folder


def dashboard_inputs(ctx: Context, gpus: int, notes: list[str]) -> list[str]:
    warehouse = dashboard_warehouse(ctx, gpus, notes)
    args = ["--warehouse", rel(warehouse, ctx.root)]
    whatif = whatif_result(ctx, warehouse, gpus, notes)
    return args + (["--whatif-dir", rel(whatif, ctx.root)] if whatif else [])


# --- the plan ---------------------------------------------------------------------------------

def plan(ctx: Context, only: list[str], sizes: list[int]) -> list[Part]:
    """The parts to run, in order: ingest, analytics per size, the Prometheus comparison (it may
    leave the materialized warehouse the dashboards read), dashboards, then the optional ones."""
    s = ctx.scripts_dir
    parts: list[Part] = []
    ready = [n for n in sizes if dataset_ready(ctx, n)]
    not_ready = [n for n in sizes if n not in ready]
    for kind in [k for k in PARTS if k in only]:
        if kind == "ingest":
            parts.append(Part("ingest", kind, s / "ingest_bench.py", [], _store_whole("ingest")))
        elif kind == "analytics":
            for n in sizes:
                parts.append(Part(
                    f"analytics {n}", kind, s / "analytics_bench.py",
                    ["--warehouse", rel(dataset(ctx, n), ctx.root)], _store_analytics(n),
                    skip=None if n in ready else f"{rel(dataset(ctx, n), ctx.root)}.done missing (dataset not built)"))
        elif kind == "prometheus":
            gpus_args = [a for n in ready for a in ("--gpus", str(n))]
            part = Part("prometheus", kind, s / "prometheus_bench.py", gpus_args, _store_prometheus,
                        skip=None if ready else "no dataset of the asked sizes is built")
            if not_ready:
                part.notes.append("sizes skipped, dataset not built: " + ", ".join(map(str, not_ready)))
            parts.append(part)
        elif kind == "dashboard":
            n = ctx.dashboard_gpus
            part = Part(f"dashboard {n}", kind, s / "dashboard_bench.py", ["--gpus", str(n), "--reuse"], _store_dashboard(n))
            part.prepare = lambda part=part, n=n: dashboard_inputs(ctx, n, part.notes)
            parts.append(part)
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
    source = {k: record[k] for k in ("name", "command", "date", "commit", "load_avg_before", "wall_s")}
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
    return {"machine": machine(), "date": utc_now(), "commit": git_commit(ctx.root), "command": command}
