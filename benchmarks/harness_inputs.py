"""What the dashboard part reads: a materialized copy of a simulated week (the pipelines' tables)
and a `gpuledger whatif schedule` result for the what-if page. The shared datasets under
data/bench/ are never written: a copy is made, or the Prometheus bench's finished copy is read."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

from harness_context import Context, HarnessError, dataset, rel

# the Prometheus bench's copy of weekN after `gpuledger pipelines run-once`
PROM_MATERIALIZED = "prom/week{gpus}-materialized.duckdb"


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
        missing = _missing_migrations(theirs)
        if missing == []:
            notes.append(f"warehouse: {rel(theirs, ctx.root)} (the Prometheus bench's materialized copy)")
            return theirs
        why = "cannot be opened now" if missing is None else f"lacks migration(s) {', '.join(map(str, missing))}"
        notes.append(f"{rel(theirs, ctx.root)} {why}; using the harness's own copy")
    source, source_done = dataset(ctx, gpus), ctx.data_dir / f"week{gpus}.duckdb.done"
    if not source_done.exists():
        raise HarnessError(f"{rel(source, ctx.root)} is not built yet ({rel(source_done, ctx.root)} missing)")
    folder = ctx.data_dir / "harness"
    ours, ours_done = folder / f"week{gpus}-materialized.duckdb", folder / f"week{gpus}-materialized.duckdb.done"
    env = {**os.environ, "GPULEDGER_WAREHOUSE": str(ours), "DAGSTER_HOME": str(folder / "dagster"), "NO_COLOR": "1"}
    env.pop("GPULEDGER_CONFIG", None)
    if ours_done.exists() and ours_done.read_text() == source_done.read_text() and ours.exists():
        _gpuledger(ctx, env, "warehouse", "migrate")
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
    """A folder holding `gpuledger whatif schedule --format json --out` of the warehouse's week, for the what-if
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
        _gpuledger(ctx, env, "whatif", "schedule", "--no-progress", "--format", "json", "--out", str(result))
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
