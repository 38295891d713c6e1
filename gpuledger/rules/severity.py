"""The squatting severity ladder, written once: a finding's severities from least to most urgent,
the idle minutes each stage starts at, and the severity of a finding idle that long.

A squatting finding is ``info`` below the policy's warn minutes, then ``warning``,
``second-warning`` and ``preempt-eligible`` (policy.squatting's warn / second_warn / preempt
minutes, which the config requires to grow); enforcement and alerts act from ``warning`` up (the
stages). The analytics (polars: :func:`severity_expr`), the what-if (one finding at a time:
:func:`severity_at`), alerts, the weekly report, the dashboards and the exporter all take it from
here; tests/rules/test_kernel_copies.py fails on a copy written by hand elsewhere."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Literal, get_args

if TYPE_CHECKING:  # the config imports this module: `config check` need not load polars
    import polars as pl

# how far back a finding's evidence reaches: a device idle all that time is idle at least this long
# (its idle minutes and idle_since are then a floor, not the stretch's true length)
LOOKBACK = timedelta(hours=6)


def idle_capped(idle_minutes):
    """Whether a finding idle ``idle_minutes`` (a number, or a polars Series / expression) was idle
    for the whole LOOKBACK, to the minute: its idle minutes and idle_since are then a floor."""
    return idle_minutes >= LOOKBACK.total_seconds() / 60 - 1

# the stages enforcement warns, escalates and preempts at (the alerts' minimum / urgent severities)
Stage = Literal["warning", "second-warning", "preempt-eligible"]
STAGES: tuple[str, ...] = get_args(Stage)
SEVERITIES = ("info", *STAGES)
# severity -> its place on the ladder (0 = info); worst first = highest rank first
SEVERITY_RANK = {severity: rank for rank, severity in enumerate(SEVERITIES)}


def stage_minutes(squatting) -> dict[str, float]:
    """Stage -> the idle minutes it starts at, under ``squatting`` (policy.squatting)."""
    minutes = (squatting.warn_minutes, squatting.second_warn_minutes, squatting.preempt_minutes)
    return dict(zip(STAGES, minutes, strict=True))


def severity_at(idle_minutes: float, squatting) -> str:
    """The severity of a squatting finding idle for ``idle_minutes``: the most urgent stage reached."""
    reached = [stage for stage, start in stage_minutes(squatting).items() if idle_minutes >= start]
    return reached[-1] if reached else SEVERITIES[0]


def severity_expr(idle_minutes: pl.Expr, squatting) -> pl.Expr:
    """:func:`severity_at` over a column of idle minutes (polars)."""
    import polars as pl  # lazy: the config imports this module, and `config check` needs no polars

    expr = pl
    for stage, start in reversed(stage_minutes(squatting).items()):
        expr = expr.when(idle_minutes >= start).then(pl.lit(stage))
    return expr.otherwise(pl.lit(SEVERITIES[0]))
