"""The activity signal: which DCGM reading says how busy a device was, and on which devices.

Best first (design.md "Input facts"): ``DCGM_FI_PROF_SM_ACTIVE`` (opt-in on the exporter), then
``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` (on by default), then ``DCGM_FI_DEV_GPU_UTIL`` — which reads
100 % for one busy SM and is always 0 on a MIG instance, so on MIG it is no reading at all. A
figure uses the best signal the device reports over the span it judges (never a mix), and
records which one. NaN is no reading.

The rule exists once, here, in the two forms the code needs: polars expressions over per-signal
sums and counts (attribution's pieces) and the SQL text of the same choice (the ``gpu_hourly``
rollup's ``s_<signal>`` / ``s_n_<signal>`` columns, read by the dashboards and the what-if
trace; per sample for label-matched samples). tests/rules/test_activity.py runs both over the same
cases.
"""

from __future__ import annotations

import polars as pl

# (signal name, gpu_samples column), best first
SIGNALS: tuple[tuple[str, str], ...] = (
    ("sm_active", "sm_active_ratio"),
    ("gr_engine_active", "gr_engine_active_ratio"),
    ("gpu_util", "gpu_util_ratio"),
)
SIGNAL_NAMES: tuple[str, ...] = tuple(name for name, _ in SIGNALS)
NOT_ON_MIG = frozenset({"gpu_util"})  # always 0 on a MIG instance: no reading there


def is_mig_expr(mig_instance_id: str = "mig_instance_id") -> pl.Expr:
    """A device is a MIG instance when it has an instance id (whole GPUs hold -1 or NULL)."""
    return pl.col(mig_instance_id).fill_null(-1) >= 0


def is_mig_sql(device: str) -> str:
    """SQL of :func:`is_mig_expr` for the ``gpus`` row aliased ``device``."""
    return f"coalesce({device}.mig_instance_id, -1) >= 0"


def best_of_sums(sum_prefix: str, count_prefix: str, is_mig: pl.Expr) -> tuple[pl.Expr, pl.Expr]:
    """(signal name, activity ratio) from columns ``<sum_prefix><signal>`` (Σ of the clipped
    ratios) and ``<count_prefix><signal>`` (readings): the best signal with a reading, its mean;
    both NULL when none has one. ``is_mig``: a boolean expression (NULL counts as a whole GPU)."""
    signal = pl.lit(None, pl.String)
    ratio = pl.lit(None, pl.Float64)
    for name in reversed(SIGNAL_NAMES):
        has = pl.col(f"{count_prefix}{name}") > 0
        if name in NOT_ON_MIG:
            has = has & ~is_mig.fill_null(False)
        signal = pl.when(has).then(pl.lit(name)).otherwise(signal)
        ratio = pl.when(has).then(pl.col(f"{sum_prefix}{name}") / pl.col(f"{count_prefix}{name}")).otherwise(ratio)
    return signal, ratio


def _sums_cases(rollup: str, is_mig: str, value) -> str:
    cases = []
    for name in SIGNAL_NAMES:
        has = f"{rollup}.s_n_{name} > 0"
        if name in NOT_ON_MIG:
            has += f" AND NOT coalesce({is_mig}, false)"
        cases.append(f"WHEN {has} THEN {value(name)}")
    return "CASE " + " ".join(cases) + " END"


def ratio_of_sums_sql(rollup: str, is_mig: str) -> str:
    """SQL of :func:`best_of_sums`' ratio over a ``gpu_hourly`` row aliased ``rollup``
    (``s_<signal>`` / ``s_n_<signal>``); ``is_mig`` a boolean SQL expression."""
    return _sums_cases(rollup, is_mig, lambda name: f"{rollup}.s_{name} / {rollup}.s_n_{name}")


def signal_of_sums_sql(rollup: str, is_mig: str) -> str:
    """SQL of :func:`best_of_sums`' signal name over the same row."""
    return _sums_cases(rollup, is_mig, lambda name: f"'{name}'")


def sample_ratio_sql(sample: str, is_mig: str) -> str:
    """One sample's reading of the best signal it carries (a sample-by-sample mean: the
    label-matched samples of jobs without device allocations), NULL when none: NaN and gpu_util
    on MIG are no reading. ``sample``: the gpu_samples alias."""
    cases = []
    for name, column in SIGNALS:
        has = f"NOT isnan({sample}.{column})"
        if name in NOT_ON_MIG:
            has += f" AND NOT coalesce({is_mig}, false)"
        cases.append(f"WHEN {has} THEN least(greatest({sample}.{column}, 0.0), 1.0)")
    return "CASE " + " ".join(cases) + " END"
