"""Resources, built once from environment variables: the warehouse and the gpuledger config.

* ``warehouse``: the DuckDB file from ``$GPULEDGER_WAREHOUSE`` (else ``data/gpuledger.duckdb``,
  made absolute at load so every run process of the code location opens the same file). Assets
  open it only through the project's own ``open_writer`` / ``open_reader`` (the writer lock and the
  readers that never fail on it), never through dagster-duckdb's ``DuckDBResource``.
* ``gpuledger_config``: the config in force (gpuledger.ledger.config_versions.config_in_force,
  the CLI's and the dashboards' answer too): the warehouse's stored version. The file
  (``$GPULEDGER_CONFIG``, else ``./gpuledger.yaml``) is read fresh in each run, and a changed file
  becomes a new stored version only through the ``reference_tables`` asset, the path ``config
  load`` takes, which says so in its metadata. With no file, the stored config stays; the packaged
  example is only what an empty warehouse starts from.
"""

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import dagster as dg

from gpuledger import warehouse as wh
from gpuledger.config import CONFIG_ENV, Config, load_config, resolve_config_path
from gpuledger.config_files import packaged_example_path
from gpuledger.ledger.config_versions import InForce, config_in_force


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
    """The gpuledger config in force (org tree, budgets, rate card, policy, ingest sources)."""

    path: str | None = None  # None: $GPULEDGER_CONFIG, else ./gpuledger.yaml (never the example over a stored config)
    warehouse_path: str | None = None  # whose stored config is in force; None: the file alone

    def config_file(self) -> Path | None:
        """The file a run reads, or None when none is given (the packaged example is not one)."""
        chosen = resolve_config_path(self.path)
        return None if chosen.resolve() == packaged_example_path().resolve() else chosen

    def in_force(self, con, *, load: bool = False, by: str = "dagster") -> InForce:
        """The config in force on ``con``; ``load``: a changed file becomes a new version (a writer)."""
        return config_in_force(con, self.config_file(), write=load, by=by, differing="load" if load else "stored")

    def load(self) -> Config:
        """The config in force: the warehouse's stored version, else (an empty or no warehouse) the file."""
        if self.warehouse_path is not None:
            try:
                with wh.open_reader(self.warehouse_path) as con:
                    return self.in_force(con).config
            except wh.WarehouseError:
                pass  # not created yet: the run's first writer makes it, from the file
        return load_config(self.path)

    def describe(self) -> str:
        return str(resolve_config_path(self.path))


def warehouse_from_env() -> Warehouse:
    return Warehouse(path=str(Path(wh.resolve_warehouse_path()).absolute()))


def config_from_env(warehouse: Warehouse | None = None) -> GpuledgerConfig:
    chosen = os.environ.get(CONFIG_ENV)
    return GpuledgerConfig(path=str(Path(chosen).absolute()) if chosen else None,
                           warehouse_path=warehouse.path if warehouse else None)


def resources_from_env() -> dict[str, dg.ConfigurableResource]:
    warehouse = warehouse_from_env()
    return {"warehouse": warehouse, "gpuledger_config": config_from_env(warehouse)}
