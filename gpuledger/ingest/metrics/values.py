"""Which DCGM values are refused: one table of plausible ranges per meaning (in base units),
turned into per-metric bounds in each metric's exported unit. Both DCGM sources use it: the
exposition parser line by line (``value_problem``), the Prometheus backfill on whole frames
(``split_invalid``); tests/test_ingest_values.py holds the two to the same verdicts.

DCGM *blank* sentinels (near 2^63, and the per-type blanks) are not refused: they become NULL.
"""

from __future__ import annotations

import math

import polars as pl

from gpuledger.ingest.metrics import dcgm_fields as dcgm

# Plausible range of each meaning in its base unit (ratio, bytes, W, J, Hz, C); outside -> refused.
VALUE_BOUNDS: dict[str, tuple[float, float]] = {
    "sm_active": (0.0, 1.0), "gr_engine_active": (0.0, 1.0), "tensor_active": (0.0, 1.0),
    "dram_active": (0.0, 1.0), "gpu_util": (0.0, 1.0),
    "fb_used": (0.0, 2.0 * 2**40), "fb_free": (0.0, 2.0 * 2**40), "fb_reserved": (0.0, 2.0 * 2**40),
    "power": (0.0, 5000.0), "energy": (0.0, math.inf),
    "sm_clock_hz": (0.0, 10e9), "gpu_temp_c": (-40.0, 200.0),
}
_RATIO_SLACK = 1e-9


def _field_checks() -> dict[str, tuple]:
    """metric -> (low, high) in the exported unit, plus the blank test's type."""
    checks = {}
    for f in dcgm.FIELDS:
        lo, hi = VALUE_BOUNDS.get(f.meaning, (-math.inf, math.inf))
        factor = dcgm.UNIT_TO_BASE[f.unit]
        slack = _RATIO_SLACK if hi == 1.0 else 0.0
        checks[f.metric] = (lo / factor, (hi + slack) / factor, f.dcgm_type, f.meaning, f.unit)
    return checks


FIELD_CHECKS = _field_checks()


def _is_blank(value: float, dcgm_type: str) -> bool:
    if value >= dcgm.SENTINEL_FLOOR:
        return True
    if dcgm_type == "fp64":
        return value >= dcgm.DCGM_FP64_BLANK
    if dcgm_type == "int32":
        return dcgm.DCGM_INT32_BLANK <= value <= 0x7FFFFFFF
    return False


def value_problem(metric: str, value: float) -> str | None:
    """Why a (finite or not) value of a catalogued metric is refused, or None when it is fine."""
    if value != value or value in (math.inf, -math.inf):
        return f"non-finite value {value!r}"
    lo, hi, dcgm_type, meaning, unit = FIELD_CHECKS[metric]
    if _is_blank(value, dcgm_type):
        return None  # DCGM blank: stored as NULL
    if value < lo:
        return f"value {value!r} {unit} below the plausible range of {meaning} (>= {lo:g})"
    if value > hi:
        return f"value {value!r} {unit} above the plausible range of {meaning} (<= {hi:g})"
    return None


def split_invalid(long: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(good, bad + reason) by the same rules as the scrape parser: non-finite, negative or
    implausible values are bad; DCGM blanks are good (they become NULL)."""
    checks = pl.DataFrame(
        [(m, lo, hi, t) for m, (lo, hi, t, _, _) in FIELD_CHECKS.items()],
        schema={"metric": pl.String, "_lo": pl.Float64, "_hi": pl.Float64, "_type": pl.String},
        orient="row")
    v = pl.col("value")
    blank = ((v >= dcgm.SENTINEL_FLOOR)
             | ((pl.col("_type") == "fp64") & (v >= dcgm.DCGM_FP64_BLANK))
             | ((pl.col("_type") == "int32") & (v >= dcgm.DCGM_INT32_BLANK) & (v <= 0x7FFFFFFF)))
    reason = (pl.when(~v.is_finite()).then(pl.lit("non-finite value"))
              .when(blank).then(None)
              .when(v < pl.col("_lo")).then(pl.format("value {} below the plausible range", v))
              .when(v > pl.col("_hi")).then(pl.format("value {} above the plausible range", v))
              .otherwise(None))
    tagged = long.join(checks, on="metric", how="left").with_columns(reason.alias("reason"))
    good = tagged.filter(pl.col("reason").is_null()).drop("_lo", "_hi", "_type", "reason")
    bad = tagged.filter(pl.col("reason").is_not_null()).drop("_lo", "_hi", "_type")
    return good, bad
