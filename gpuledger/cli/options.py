"""What every command shares: which warehouse file and which config file, time options, output files."""

from __future__ import annotations

from enum import Enum
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


def existing_warehouse(option: Path | None) -> Path:
    """The warehouse of a command that only reads or adds to one (links, prunes, runs the
    pipelines over it): a missing file is a mistyped --warehouse, refused (exit 2) instead of a new
    folder and an empty warehouse made there."""
    from gpuledger.errors import UsageError

    path = warehouse_path(option)
    if not path.exists():
        raise UsageError(f"no warehouse at {path}: this command works on an existing one (a mistyped --warehouse?); "
                         "make one with `gpuledger simulate warehouse`, an import or `gpuledger warehouse migrate`, "
                         "or point --warehouse / $GPULEDGER_WAREHOUSE at it")
    return path


def config_or_exit(option: Path | None):
    """Load the config, or print its validation errors and exit 2."""
    from gpuledger.config import ConfigError, load_config  # pydantic + polars: only when needed

    try:
        return load_config(option)
    except ConfigError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None


def utc_option(text: str | None, option: str):
    """An option's UTC time (ISO-8601 or epoch seconds, see gpuledger.rules.clock), or a usage error naming it."""
    from gpuledger.rules.clock import parse_utc

    if text is None:
        return None
    try:
        return parse_utc(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint=option) from None


def utc_range(start: str | None, end: str | None, *, start_option: str = "--start",
              end_option: str = "--end"):
    """(start, end) of a command's time range; a usage error unless the end comes after the start.
    Either may be None (the command then picks its default)."""
    lo, hi = utc_option(start, start_option), utc_option(end, end_option)
    check_range(lo, hi, start_option=start_option, end_option=end_option)
    return lo, hi


def check_range(lo, hi, *, start_option: str = "--start", end_option: str = "--end") -> None:
    """A usage error unless ``hi`` comes after ``lo`` (either None: nothing to check)."""
    if lo is not None and hi is not None and hi <= lo:
        raise typer.BadParameter(f"{hi:%Y-%m-%dT%H:%M:%S}Z is not after {start_option} "
                                 f"{lo:%Y-%m-%dT%H:%M:%S}Z (the range is [start, end))",
                                 param_hint=end_option)


def out_file(path: Path | None, option: str = "--out") -> Path | None:
    """A file a command is about to write: its directory must exist and it must not be a
    directory itself, else a usage error naming the option (checked before any work is done)."""
    if path is None:
        return None
    if path.is_dir():
        raise typer.BadParameter(f"{path} is a directory; give a file name in it", param_hint=option)
    parent = path.parent
    if not parent.is_dir():
        what = "is not a directory" if parent.exists() else "does not exist"
        raise typer.BadParameter(f"directory {parent} {what}; create it first or choose another path",
                                 param_hint=option)
    if path.exists() and not path.is_file():
        if path.is_char_device() or path.is_fifo():  # /dev/stdout, a pipe: fine to write to
            return path
        raise typer.BadParameter(f"{path} is not a regular file", param_hint=option)
    import tempfile  # only for an output file: its import (random, shutil) costs every command ~2 ms

    try:  # a real probe: os.access says yes to root on a read-only mount
        with tempfile.TemporaryFile(dir=parent):
            pass
    except OSError as exc:
        raise typer.BadParameter(f"cannot write in {parent} ({exc.strerror or exc}); choose another path",
                                 param_hint=option) from None
    return path


def warehouse_config(con, option: Path | None, *, write: bool):
    """The config a command uses: the warehouse's stored one (gpuledger.ledger.config_versions).
    ``option`` (--config / $GPULEDGER_CONFIG) must match it; an empty warehouse takes the file's
    config (writers store it as version 1) and the note saying so goes to stderr."""
    from gpuledger.ledger.config_versions import config_for_command

    cfg, note = config_for_command(con, option, write=write)
    if note:
        typer.echo(note, err=True)
    return cfg


class ReadConfig:
    """The config a read command uses, validated only when used: with no ``--config`` the
    warehouse's stored version is in force (as config_in_force says), and a read served from
    materialized rows needs at most one setting of it (:meth:`setting`), which the stored
    canonical JSON gives without pydantic (BENCHMARKS.md "Read model and CLI latency")."""

    def __init__(self, stored=None, cfg=None) -> None:
        self._stored, self._cfg = stored, cfg

    @property
    def policy(self):
        return (self._cfg if self._cfg is not None else self._stored.config).policy

    def setting(self, path: str):
        """One setting by dotted path (``policy.usage.mode``)."""
        if self._stored is not None:
            return self._stored.setting(path)
        value = self._cfg
        for key in path.split("."):
            value = getattr(value, key)
        return value


def read_config(con, option: Path | None) -> ReadConfig:
    """:func:`warehouse_config` for a read command, validated on first use of ``.policy``."""
    from gpuledger.config_store import stored_config

    if option is None:
        stored = stored_config(con)
        if stored is not None:
            return ReadConfig(stored=stored)
    return ReadConfig(cfg=warehouse_config(con, option, write=False))


class Format(str, Enum):
    table = "table"
    csv = "csv"
    parquet = "parquet"
    json = "json"


def _regime(value: str | None) -> str | None:
    """--regime: one of the simulator's demand regimes (checked before any work); None when not given."""
    from gpuledger.simulator.defaults import REGIME_NAMES

    if value is not None and value not in REGIME_NAMES:
        raise typer.BadParameter(f"{value!r} is no demand regime; choose {' or '.join(REGIME_NAMES)}",
                                 param_hint="--regime")
    return value


RegimeOpt = typer.Option(
    None, "--regime", callback=_regime, show_default=False,
    help="the simulated demand [default: ai2-backlog]: ai2-backlog (each team a standing backlog of "
         "~2.5x its share, mild seasons) or ai2-seasonal (deadline, exploring, quiet and normal weeks in "
         "turn: teams lend and borrow; README \"The simulator\")")


# every command that prints a table takes these two (README "Tables")
FormatOpt = typer.Option(Format.table, "--format", "-f", help="table (terminal), csv, parquet or json")
OutOpt = typer.Option(None, "--out", "-o", callback=lambda value: out_file(value),
                      help="file to write (table as plain text, csv, parquet, json); default stdout")


class LazyConsole:
    """rich's Console, made on the first print: a read command that prints only a table (most of
    them) never imports rich, ~13 ms of its start (BENCHMARKS.md "Read model and CLI latency")."""

    def __init__(self) -> None:
        self._console = None

    def print(self, *args, **kwargs) -> None:
        if self._console is None:
            from rich.console import Console

            self._console = Console()
        self._console.print(*args, **kwargs)
