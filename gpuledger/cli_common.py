"""Options every subcommand shares: which warehouse file and which config file."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gpuledger.config_files import CONFIG_ENV
from gpuledger.warehouse.paths import WAREHOUSE_ENV, resolve_warehouse_path

WarehouseOpt = Annotated[
    Path | None,
    typer.Option(
        "--warehouse",
        "-w",
        envvar=WAREHOUSE_ENV,
        help=f"DuckDB warehouse file (env {WAREHOUSE_ENV}; default data/gpuledger.duckdb)",
        show_default=False,
    ),
]
ConfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--config",
        "-c",
        envvar=CONFIG_ENV,
        help=f"config YAML (env {CONFIG_ENV}; default ./gpuledger.yaml, else the packaged example)",
        show_default=False,
    ),
]


def warehouse_path(option: Path | None) -> Path:
    return resolve_warehouse_path(option)


def config_or_exit(option: Path | None):
    """Load the config, or print its validation errors and exit 2."""
    from gpuledger.config import ConfigError, load_config  # pydantic + polars: only when needed

    try:
        return load_config(option)
    except ConfigError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None
