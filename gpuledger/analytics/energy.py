"""Energy per sample interval from DCGM's total-energy counter, with counter resets handled.

``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`` (``gpu_samples.energy_total_j``) counts joules since the
driver loaded; a driver reload restarts it from 0. A drop is a reset: the energy of that interval is
the new value itself (what was counted since the reset), never a negative difference. Pure polars,
LazyFrame in, LazyFrame out. The rule lives in :func:`counter_increment`; attribution's hourly
sums and the warehouse's gpu_hourly SQL (warehouse/rollups.py) apply the same rule.
"""

from __future__ import annotations

import polars as pl


def counter_increment(value: pl.Expr, previous: pl.Expr) -> pl.Expr:
    """Joules between two readings of the energy counter: the difference, or the new reading
    itself when the counter dropped (a reset)."""
    step = value - previous
    return pl.when(step < 0).then(value).otherwise(step)


def energy_per_interval_j(
    samples: pl.LazyFrame,
    *,
    by: str = "gpu_id",
    ts: str = "ts",
    counter: str = "energy_total_j",
    out: str = "energy_interval_j",
) -> pl.LazyFrame:
    """Add ``out``: joules used between a sample and the previous non-NULL counter reading of the
    same device (``by``), in time order. NULL for a device's first reading and where the counter is
    NULL (a DCGM blank); on a reset (counter drops) the new reading counts from 0. Rows come back
    sorted by (``by``, ``ts``)."""
    value = pl.col(counter)
    previous = value.forward_fill().shift(1).over(by)
    return samples.sort([by, ts]).with_columns(
        pl.when(value.is_null() | previous.is_null()).then(None)
        .otherwise(counter_increment(value, previous))
        .alias(out)
    )
