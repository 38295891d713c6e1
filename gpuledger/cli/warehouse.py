"""`gpuledger warehouse …`: the warehouse itself — create or migrate it, what it holds, what was
quarantined, disk use per table, raw-sample retention, retired GPUs. Light at import (the warehouse
and polars load when a command runs)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gpuledger import warehouse
from gpuledger.cli.options import (
    ConfigOpt,
    Format,
    FormatOpt,
    OutOpt,
    WarehouseOpt,
    existing_warehouse,
    warehouse_config,
    warehouse_path,
)
from gpuledger.cli.views import reports, tables
from gpuledger.cli.views.show import show_frame
from gpuledger.cli.views.tables import Column, View
from gpuledger.errors import printable
from gpuledger.lazy import lazy_import

facts = lazy_import("gpuledger.facts")  # the summary computes with polars + DuckDB: loaded when it runs

app = typer.Typer(help="The warehouse: migrate, summary, quarantine, disk use, prune, retire a GPU.",
                  no_args_is_help=True)

DISK = View(
    columns=(
        Column("table", "table", key=True),
        Column("rows", "rows", "int", key=True),
        Column("disk_mib", "disk\n(MiB)", "num", key=True),
    ),
    notes=(("", ("disk: DuckDB pragma_storage_info blocks of the table's columns (256 KiB each, a shared "
                 "block split by segment count); indexes and catalog are their own line")),),
)


def disk_use_frame(con):
    """Disk use per table, then the indexes-and-metadata and free lines (MiB), for the terminal."""
    import polars as pl

    uses, totals = warehouse.table_disk_use(con)
    mib = 1024 * 1024
    rows = [(u.table, u.rows, u.bytes / mib) for u in uses if u.rows or u.bytes]
    empty = sum(1 for u in uses if not (u.rows or u.bytes))
    if empty:
        rows.append((f"({empty} empty tables)", 0, 0.0))
    rows += [("(indexes, catalog)", None, totals["indexes_and_metadata_bytes"] / mib),
             ("(free blocks)", None, totals["free_bytes"] / mib),
             ("(file)", None, totals["file_bytes"] / mib)]
    return pl.DataFrame(rows, schema={"table": pl.String, "rows": pl.Int64, "disk_mib": pl.Float64}, orient="row")


@app.command("migrate")
def migrate(warehouse_file: WarehouseOpt = None) -> None:
    """Create the warehouse or bring its schema up to date (numbered migrations)."""
    from gpuledger.warehouse import writer_guard

    writer_guard.check_ordinal()  # a StatefulSet's replica 1 would migrate a second, empty warehouse
    path = warehouse_path(warehouse_file)
    with warehouse.open_writer(path) as con:
        version = warehouse.schema_version(con)
    if con.backup_path is not None:
        typer.echo(f"backup before migrating: {con.backup_path} (README \"Restoring a backup\")")
    typer.echo(f"warehouse {path}: schema version {version}")


@app.command("summary")
def summary(fmt: Format = FormatOpt, out: Path | None = OutOpt, warehouse_file: WarehouseOpt = None) -> None:
    """What the warehouse holds: GPUs, jobs, allocated GPU-hours, samples, quarantined lines, and
    disk use per table (csv / parquet / json: the figures; `warehouse disk` has the disk use)."""
    import polars as pl

    with warehouse.open_reader(warehouse_path(warehouse_file)) as con:
        figures = facts.warehouse_summary(con)
        disk = disk_use_frame(con)
    frame = pl.DataFrame({"figure": list(figures), "value": [tables.format_value(v) for v in figures.values()]})
    show_frame(frame, fmt, out, f"gpuledger warehouse {warehouse_path(warehouse_file)}", reports.SUMMARY)
    if fmt is Format.table and out is None:
        tables.print_table(disk, DISK, title="disk use per table")


@app.command("quarantine")
def quarantine_list(
    warehouse_file: WarehouseOpt = None,
    source: str | None = typer.Option(None, help="only this source, e.g. jobs-csv or scrape"),
    limit: int = typer.Option(20, min=0, max=1_000_000, help="rows to show"),
    fmt: Format = FormatOpt, out: Path | None = OutOpt,
    wide: bool = tables.WideOpt, columns: str | None = tables.ColumnsOpt,
) -> None:
    """Show quarantined input: where it came from, why it was refused, the raw text."""
    import polars as pl

    with warehouse.open_reader(warehouse_path(warehouse_file)) as con:
        rows = con.execute(
            "SELECT quarantined_at, source, location, reason, left(raw_text, 80) FROM quarantine "
            "WHERE ? IS NULL OR source = ? ORDER BY quarantined_at DESC, source, location, reason, raw_text LIMIT ?",
            [source, source, limit],
        ).fetchall()
    names = ("quarantined_at", "source", "location", "reason", "raw_text")
    # never raw bytes or control characters to the terminal
    frame = pl.DataFrame([[r[0], *(printable(str(v)) for v in r[1:])] for r in rows], schema=names, orient="row")
    show_frame(frame, fmt, out, "quarantine (newest first)", reports.QUARANTINE, wide, columns)


@app.command("disk")
def disk(fmt: Format = FormatOpt, out: Path | None = OutOpt, warehouse_file: WarehouseOpt = None) -> None:
    """Disk use per table (MiB) and the file's totals."""
    path = warehouse_path(warehouse_file)
    with warehouse.open_reader(path) as con:
        frame = disk_use_frame(con)
    show_frame(frame, fmt, out, f"disk use of {path}", DISK)


@app.command("prune")
def prune(
    keep_days: Annotated[float | None, typer.Option(
        "--keep-days", min=0.01, max=36_500,  # a century: 1e12 or inf would overflow the date arithmetic
        help="keep raw samples this many days back from the newest [default: the config's "
             "policy.retention.raw_sample_days, 35]")] = None,
    warehouse_file: WarehouseOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Delete raw samples older than the retention whose hourly rollups are complete (the partial
    hours at allocation edges stay: reports read those raw). Rollups, jobs, findings and
    statements are kept; reports of the pruned period do not change."""
    path = existing_warehouse(warehouse_file)
    with warehouse.open_writer(path) as con:
        days = keep_days if keep_days is not None else (
            warehouse_config(con, config, write=True).policy.retention.raw_sample_days)
        stats = warehouse.prune_raw_samples(con, keep_days=days)
    if stats.pruned_before is None:
        typer.echo(f"warehouse {path}: no raw samples older than {days:g} days to prune")
        return
    typer.echo(f"warehouse {path}: pruned raw samples before {stats.pruned_before.isoformat()}Z "
               f"({days:g} days kept): {stats.rows_deleted:,} deleted, {stats.rows_kept:,} kept for "
               f"partial hours, {stats.hours_completed:,} hourly rollups completed first. DuckDB reuses "
               "the freed blocks for new data (the file does not shrink).")


@app.command("retire-gpu")
def retire_gpu(
    gpu_uuid: Annotated[str, typer.Argument(help="the physical GPU's UUID (GPU-...); its MIG instances go with it")],
    at: Annotated[str | None, typer.Option(
        "--at", help="UTC time it left (ISO-8601 or epoch s) [default: now]")] = None,
    cluster: Annotated[str | None, typer.Option(help="the cluster, when the UUID is in several")] = None,
    undo: Annotated[bool, typer.Option("--undo", help="clear the entry: back to last seen + the grace")] = False,
    warehouse_file: WarehouseOpt = None,
) -> None:
    """Retire a device explicitly: it is capacity (and costs idle) only until then. Without an
    entry a device counts until its last sample plus policy.chargeback.retire_after_hours."""

    from gpuledger.rules.clock import parse_utc, utc_now

    when = None
    if not undo:
        try:
            when = parse_utc(at) if at else utc_now()
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--at") from None
    path = existing_warehouse(warehouse_file)
    with warehouse.open_writer(path) as con:
        where, rows = warehouse.retire_gpu(con, gpu_uuid, at=when, cluster=cluster)
    what = "no longer retired" if undo else f"retired at {when.isoformat()}Z"
    typer.echo(f"warehouse {path}: GPU {gpu_uuid} of cluster {where} {what} ({rows} inventory rows)")


@app.command("shell")
def shell(
    command: Annotated[str | None, typer.Option(
        "--command", help="run this SQL (statements separated by ;) and exit, instead of a prompt")] = None,
    max_rows: Annotated[int, typer.Option("--max-rows", min=1, help="rows shown per result")] = 40,
    warehouse_file: WarehouseOpt = None,
) -> None:
    """An SQL prompt on the warehouse that never stops its writers: each statement runs on its own
    short read-only connection through the reader lock (as the dashboards read), which it closes
    before the next prompt, so a writer waits at most one query, not the whole session (a plain
    `duckdb` shell holding the file makes every writer fail). Read-only: writes are refused."""
    import shutil

    import duckdb

    path = warehouse_path(warehouse_file)

    def run(sql: str) -> bool:
        try:
            with warehouse.open_reader(path) as con:
                relation = con.sql(sql)
                if relation is not None:
                    relation.show(max_rows=max_rows, max_width=shutil.get_terminal_size().columns)
        except duckdb.Error as exc:
            typer.secho(f"gpuledger warehouse shell: {printable(str(exc)).splitlines()[0]}", err=True, fg="red")
            return False
        return True

    if command is not None:
        failed = [s for s in _statements(command) if not run(s)]
        raise typer.Exit(1 if failed else 0)
    typer.echo(f"warehouse {path} (read-only; each statement takes the reader lock only while it runs). "
               "End statements with ;  Ctrl-D quits.", err=True)
    pending = ""
    while True:
        try:
            line = input("gpuledger> " if not pending else "      ...> ")
        except EOFError:
            typer.echo("", err=True)
            return
        except KeyboardInterrupt:
            typer.echo("", err=True)
            pending = ""
            continue
        pending += line + "\n"
        if pending.rstrip().endswith(";"):
            for sql in _statements(pending):
                run(sql)
            pending = ""


def _statements(text: str) -> list[str]:
    """The non-empty statements of ``text`` (split on ; outside quotes, by DuckDB's own parser)."""
    import duckdb

    try:
        return [s.query.strip() for s in duckdb.extract_statements(text)]
    except duckdb.Error:
        return [text]  # let the run report the parser's error
