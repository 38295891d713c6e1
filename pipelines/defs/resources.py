"""Resources, built once from environment variables: the warehouse and the gpuledger config.

* ``warehouse``: the DuckDB file from ``$GPULEDGER_WAREHOUSE`` (else ``data/gpuledger.duckdb``,
  made absolute at load so every run process of the code location opens the same file). Assets
  open it only through the project's own ``open_writer`` / ``open_reader`` (the writer lock and the
  readers that never fail on it), never through dagster-duckdb's ``DuckDBResource``.
* ``gpuledger_config``: the config file from ``$GPULEDGER_CONFIG`` (else ``./gpuledger.yaml``, else
  the packaged example), read fresh in each run so an edited file takes effect without a reload.
"""

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import dagster as dg

from gpuledger import warehouse as wh
from gpuledger.config import CONFIG_ENV, Config, load_config, read_config_file, resolve_config_path


class Warehouse(dg.ConfigurableResource):
    """The gpuledger DuckDB warehouse (one file; writers queue, readers never block)."""

    path: str

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        """Before a run's first step: a warehouse that is missing or behind this gpuledger's
        migrations is created / migrated by one short writer, so readers in any step never
        refuse it (they do not change the file)."""
        try:
            with wh.open_reader(self.path):
                return
        except wh.WarehouseError:
            pass
        with wh.open_writer(self.path):
            pass

    @contextlib.contextmanager
    def writer(self) -> Iterator:
        """A migrated read-write connection for one unit of work (the project's writer lock)."""
        with wh.open_writer(self.path) as con:
            yield con

    @contextlib.contextmanager
    def reader(self) -> Iterator:
        """A short read-only connection that sees committed data only."""
        with wh.open_reader(self.path) as con:
            yield con


class GpuledgerConfig(dg.ConfigurableResource):
    """The gpuledger config file (org tree, budgets, rate card, policy, ingest sources)."""

    path: str | None = None  # None: ./gpuledger.yaml, else the packaged example

    def load(self) -> Config:
        return load_config(self.path)

    def read(self) -> tuple[Config, str, Path]:
        """(the config, the file's text, the file) — the text is what the ledger stores."""
        return read_config_file(self.path)

    def describe(self) -> str:
        return str(resolve_config_path(self.path))


def warehouse_from_env() -> Warehouse:
    return Warehouse(path=str(Path(wh.resolve_warehouse_path()).absolute()))


def config_from_env() -> GpuledgerConfig:
    chosen = os.environ.get(CONFIG_ENV)
    return GpuledgerConfig(path=str(Path(chosen).absolute()) if chosen else None)


def resources_from_env() -> dict[str, dg.ConfigurableResource]:
    return {"warehouse": warehouse_from_env(), "gpuledger_config": config_from_env()}
