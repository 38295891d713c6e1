"""The sites' hourly grid-intensity series into the warehouse (``grid_intensity_hours``), replaced
whole on every ``config load`` — like the rate card, the config names the data; unlike it, the
numbers live in a CSV file beside the config, read here. Bad lines are quarantined with the file,
line, field and fix; the good lines beside them are kept."""

from __future__ import annotations

from pathlib import Path

import duckdb
import polars as pl

from gpuledger.analytics.carbon import INTENSITY_SCHEMA, read_intensity_csv
from gpuledger.config import ConfigError
from gpuledger.warehouse.writes import QuarantineRow, quarantine

SOURCE = "grid-intensity"


def intensity_path(csv: str, source: str | Path | None) -> Path:
    """The CSV's path: as given when absolute, else beside the config file ``source``."""
    path = Path(csv)
    if path.is_absolute() or source is None or str(source).startswith("("):
        return path
    return Path(source).parent / path


def replace_grid_intensity(con: duckdb.DuckDBPyConnection, cfg, *, source: str | Path | None) -> list[str]:
    """Make grid_intensity_hours exactly the config's CSV series; returns one warning per
    quarantined line. A file that cannot be read is a ConfigError naming it and the field."""
    frames, warnings = [], []
    for name, site in sorted(cfg.clusters.items()):
        if site.grid_intensity is None or site.grid_intensity.csv is None:
            continue
        try:
            frame, bad = read_intensity_csv(intensity_path(site.grid_intensity.csv, source), name)
        except ValueError as exc:
            raise ConfigError(f"clusters.{name}.grid_intensity.csv: {exc}") from None
        frames.append(frame)
        quarantine(con, [QuarantineRow(SOURCE, b.location, b.raw_text, b.reason) for b in bad])
        warnings += [f"{b.location}: {b.reason} (quarantined; the other lines kept)" for b in bad]
    con.execute("DELETE FROM grid_intensity_hours").fetchall()
    rows = pl.concat(frames) if frames else pl.DataFrame(schema=INTENSITY_SCHEMA)
    if rows.height:
        con.register("_grid_rows", rows.to_arrow())
        try:
            con.execute("INSERT INTO grid_intensity_hours SELECT cluster, hour, kg_co2e_per_kwh FROM _grid_rows")
        finally:
            con.unregister("_grid_rows")
    return warnings
