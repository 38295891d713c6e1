"""`gpuledger config check | example | load | versions`: the config file (org tree, budgets, rate
card, policy) and the versions of it the warehouse holds.

Light at import (typer, rich): DuckDB, polars and pydantic load when a command runs.
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from gpuledger.cli.options import (
    ConfigOpt,
    Format,
    FormatOpt,
    OutOpt,
    WarehouseOpt,
    config_or_exit,
    warehouse_path,
)
from gpuledger.cli.period import ByOpt
from gpuledger.cli.views.show import print_rows
from gpuledger.config_files import example_config_text, resolve_config_path

app = typer.Typer(help="Check or print the config file (org tree, budgets, rate card, policy); load it "
                       "into the warehouse as a new version.", no_args_is_help=True)
console = Console()


@app.command("check")
def config_check(config: ConfigOpt = None) -> None:
    """Validate the config; errors name the field and the fix."""
    cfg = config_or_exit(config)
    console.print(
        f"{resolve_config_path(config)}: ok — {len(cfg.node_names())} org nodes, "
        f"{len(cfg.projects())} projects, {len(cfg.budgets)} budgets, {len(cfg.rate_card)} rates"
    )


@app.command("example")
def config_example() -> None:
    """Print the documented example config (start your own from it)."""
    typer.echo(example_config_text(), nl=False)


@app.command("load")
def config_load(config: ConfigOpt = None, warehouse_file: WarehouseOpt = None, by: str | None = ByOpt) -> None:
    """Make the config file the warehouse's config: a new version (content, hash, source, who,
    when) unless nothing changed, printing what changed. Closed periods keep their statements."""
    from gpuledger import warehouse
    from gpuledger.config import read_config_file
    from gpuledger.ledger.config_versions import load_version

    cfg, text, source = read_config_file(config)
    with warehouse.open_writer(warehouse_path(warehouse_file)) as con:
        result = load_version(con, cfg, text=text, source=source, by=by)
    for warning in result.warnings:
        typer.echo(f"warning: {warning}", err=True)
    if not result.added:
        console.print(f"{source}: unchanged, the warehouse already holds this content as config version "
                      f"{result.version}")
        return
    console.print(f"{source}: loaded as config version {result.version} ({len(cfg.node_names())} org nodes, "
                  f"{len(cfg.budgets)} budgets, {len(cfg.rate_card)} rates)")
    for line in result.changes:
        console.print(f"  {line}")
    for period in result.closed_periods_affected:
        console.print(f"  closed period {period} keeps its issued statement; to re-issue it with these rates run "
                      f"`gpuledger period correct {period} --reason \"...\"`", style="yellow")
    if result.open_periods_repriced:
        console.print(f"  past periods still open are priced with this version: "
                      f"{', '.join(result.open_periods_repriced)} (freeze one with `gpuledger period close YYYY-MM`)",
                      style="yellow")


@app.command("versions")
def config_versions(fmt: Format = FormatOpt, out: Path | None = OutOpt, warehouse_file: WarehouseOpt = None) -> None:
    """Every config the warehouse was loaded from: version, content hash, source, who, when."""
    from gpuledger import warehouse
    from gpuledger.config import MISSING_CURRENCY_DEFAULT
    from gpuledger.ledger.config_versions import config_versions as versions
    from gpuledger.ledger.config_versions import versions_without_currency

    with warehouse.open_reader(warehouse_path(warehouse_file)) as con:
        frame = versions(con)
        unnamed = versions_without_currency(con)
    if unnamed:  # stored before a config file had to name its currency
        typer.echo(f"note: config version(s) {', '.join(map(str, unnamed))} name no currency; they were "
                   f"accepted and are read as {MISSING_CURRENCY_DEFAULT} (a file must now say "
                   f"`currency: {MISSING_CURRENCY_DEFAULT}`; loading it changes nothing else)", err=True)
    print_rows("config versions", ["version", "sha256", "source", "loaded at (UTC)", "by", "changes"],
           [(v, sha[:12], src, at, who, (ch or "").replace("\n", "; ")) for v, sha, src, at, who, ch in frame.iter_rows()],
               fmt, out)
