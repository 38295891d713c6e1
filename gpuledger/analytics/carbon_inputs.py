"""What analytics.carbon.with_carbon reads from the warehouse: the sites' PUE and constant
intensity (the stored config's clusters) and the hourly grid-intensity series that `config load`
stored (gpuledger.ledger.grid_intensity writes it). The query layer (analytics.queries) and the
statement both read here, below the ledger."""

from __future__ import annotations

import duckdb
import polars as pl

from gpuledger.analytics.carbon import INTENSITY_SCHEMA, SITE_SCHEMA, site_factors
from gpuledger.config_store import stored_config_in_force


def grid_intensity(con: duckdb.DuckDBPyConnection, start, end) -> pl.DataFrame:
    """The stored series in [start, end) (INTENSITY_SCHEMA); empty before migration 023."""
    try:
        # duckdb 2.0: a relation (sql) has .pl(), an execute() result has not
        return con.sql("SELECT cluster, hour, kg_co2e_per_kwh FROM grid_intensity_hours "
                       "WHERE hour >= $start AND hour < $end ORDER BY cluster, hour",
                       params={"start": start, "end": end}).pl().cast(INTENSITY_SCHEMA)
    except duckdb.CatalogException:
        return pl.DataFrame(schema=INTENSITY_SCHEMA)


def site_inputs(con: duckdb.DuckDBPyConnection, start, end) -> tuple[pl.DataFrame, pl.LazyFrame]:
    """What analytics.carbon.with_carbon needs: the sites' PUE and constant intensity (the stored
    config's clusters) and the hourly series in [start, end)."""
    cfg = stored_config_in_force(con)
    sites = site_factors(cfg.clusters) if cfg is not None else pl.DataFrame(schema=SITE_SCHEMA)
    return sites, grid_intensity(con, start, end).lazy()
