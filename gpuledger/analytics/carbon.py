"""Facility energy and emissions from the GPUs' own energy: pure polars, no I/O but the CSV reader.

Units: kWh, kgCO2e, PUE a ratio ≥ 1, grid intensity kgCO2e per kWh.

  facility kWh = GPU kWh × PUE(site)
  kgCO2e       = facility kWh × intensity(site, hour)

A *site* is a cluster (``clusters.<name>`` in the config). GPU kWh is attribution's ``energy_kwh``
(DCGM's energy counter over the allocation; a MIG slice its compute share of its GPU's, a shared
GPU split by allocation fraction). The hour's intensity is the site's hourly series where it has
that hour, else its constant. Where a GPU reports no energy, or the site has no PUE / intensity,
the figure is NULL — unknown, never 0 — and those GPU-hours are counted beside it
(``gpu_hours_co2_unknown``: the hours the kgCO2e figure leaves out, whatever the reason).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import polars as pl

INTENSITY_SCHEMA = {"cluster": pl.String, "hour": pl.Datetime("us"), "kg_co2e_per_kwh": pl.Float64}
SITE_SCHEMA = {"cluster": pl.String, "pue": pl.Float64, "kg_co2e_per_kwh_constant": pl.Float64}
MAX_INTENSITY = 3.0  # kgCO2e/kWh: coal is ~1.0; more is a unit error (g/kWh written as kg)


@dataclass(frozen=True)
class BadLine:
    location: str  # file:line
    raw_text: str
    reason: str  # names the field and the fix


def site_factors(clusters: dict) -> pl.DataFrame:
    """Per configured cluster: its PUE and constant grid intensity (either may be NULL)."""
    rows = [(name, c.pue, c.grid_intensity.kg_co2e_per_kwh if c.grid_intensity else None)
            for name, c in sorted(clusters.items())]
    return pl.DataFrame(rows, schema=SITE_SCHEMA, orient="row")


def _hour(text: str) -> datetime:
    moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC).replace(tzinfo=None)
    if moment.minute or moment.second or moment.microsecond:
        raise ValueError("not on the hour")
    return moment


def read_intensity_csv(path: Path, cluster: str) -> tuple[pl.DataFrame, list[BadLine]]:
    """An hourly grid-intensity series (columns ``hour``, ``kg_co2e_per_kwh``): the good rows
    (INTENSITY_SCHEMA) and each bad line with the field and the fix. A missing file or header is a
    ValueError naming it."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ValueError(f"{path}: cannot read it ({exc.strerror or exc}); give the path of an hourly CSV "
                         "(hour,kg_co2e_per_kwh), absolute or relative to the config file") from None
    reader = csv.reader(text.splitlines())
    header = next(reader, None)
    if header is None or [h.strip() for h in header[:2]] != ["hour", "kg_co2e_per_kwh"]:
        raise ValueError(f"{path}:1: the header must be 'hour,kg_co2e_per_kwh' (got {','.join(header or [])!r})")
    good, bad, seen = [], [], set()
    for lineno, row in enumerate(reader, start=2):
        raw = ",".join(row)
        where = f"{path}:{lineno}"
        if not row or not raw.strip():
            continue
        if len(row) < 2:
            bad.append(BadLine(where, raw, "too few fields: give hour,kg_co2e_per_kwh"))
            continue
        try:
            hour = _hour(row[0])
        except ValueError as exc:
            why = "is not on the hour (one value per whole UTC hour)" if "on the hour" in str(exc) else \
                "is not an ISO 8601 time"
            bad.append(BadLine(where, raw, f"hour {row[0]!r} {why}: give e.g. 2026-10-01T13:00:00Z"))
            continue
        try:
            value = float(row[1])
        except ValueError:
            value = float("nan")
        if not 0.0 <= value <= MAX_INTENSITY:
            bad.append(BadLine(where, raw, f"kg_co2e_per_kwh {row[1]!r}: give kgCO2e per kWh between 0 and "
                                           f"{MAX_INTENSITY} (g/kWh ÷ 1000)"))
            continue
        if hour in seen:
            bad.append(BadLine(where, raw, f"hour {row[0]!r} given twice: keep one value per hour"))
            continue
        seen.add(hour)
        good.append((cluster, hour, value))
    return pl.DataFrame(good, schema=INTENSITY_SCHEMA, orient="row"), bad


def with_carbon(rows: pl.LazyFrame, sites: pl.DataFrame, hourly: pl.LazyFrame) -> pl.LazyFrame:
    """``rows`` (cluster, hour, energy_kwh, gpu_hours_allocated — attribution's shape) with
    ``pue``, ``kg_co2e_per_kwh`` (the hour's intensity), ``energy_kwh_facility``, ``kg_co2e``
    (NULL where unknown) and ``gpu_hours_co2_unknown`` (the hours whose kgCO2e is unknown: no
    energy reading, or the site has no PUE or no intensity for that hour)."""
    hourly = hourly.select(pl.col("cluster").cast(pl.String), pl.col("hour").cast(pl.Datetime("us")),
                           pl.col("kg_co2e_per_kwh").alias("_kg_hour"))
    facility = pl.col("energy_kwh") * pl.col("pue")
    return (
        rows.join(sites.lazy(), on="cluster", how="left")
        .join(hourly, on=["cluster", "hour"], how="left")
        .with_columns(kg_co2e_per_kwh=pl.coalesce("_kg_hour", "kg_co2e_per_kwh_constant"))
        .with_columns(
            energy_kwh_facility=facility,
            kg_co2e=facility * pl.col("kg_co2e_per_kwh"),
        )
        .with_columns(gpu_hours_co2_unknown=pl.when(pl.col("kg_co2e").is_null())
                      .then(pl.col("gpu_hours_allocated")).otherwise(0.0))
        .drop("_kg_hour", "kg_co2e_per_kwh_constant")
    )


def known_sum(col: str) -> pl.Expr:
    """Σ ``col`` over the known rows; NULL when none is known (unknown stays unknown, never 0)."""
    return pl.when(pl.col(col).is_not_null().any()).then(pl.col(col).sum()).otherwise(None).alias(col)


def carbon_sums() -> list[pl.Expr]:
    """The aggregation of :func:`with_carbon` output for a group: GPU kWh, facility kWh, kgCO2e
    (known parts; NULL when none known) and the GPU-hours whose kgCO2e is unknown."""
    return [known_sum("energy_kwh"), known_sum("energy_kwh_facility"), known_sum("kg_co2e"),
            pl.col("gpu_hours_co2_unknown").sum()]
