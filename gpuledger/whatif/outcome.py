"""The outcome table Ai2 would recognise (issue 34): each policy and the two baselines over several
seeds — each seed its own trace (a simulated warehouse, or the draws of one warehouse's never-started
jobs) — as min, median and max of every figure.

Figures: aggregate delivered ÷ owed, teams at ≥ 0.95 of owed, the worst team, occupancy, burst
(share of allocated GPU-hours above owed), waits p50 / p90 per job class in seconds (and the debug
jobs' p90 the rules force, the bound below theirs), preemptions
and the GPU-hours they threw away, squatted and reclaimed GPU-hours, and the ceiling of delivered ÷
owed (owed against occupied capacity per settlement period). Targets are issue 34's (Ai2's result).
Pure: summaries (metrics.summarize) in, rows out. TARGET_NOTE says the targets' conditions the
short target cells leave out.
"""

from __future__ import annotations

import statistics
from typing import NamedTuple

import polars as pl

from gpuledger.rules.job_class import SESSION_PATIENCE_S
from gpuledger.whatif.metrics import WAIT_CLASSES
from gpuledger.whatif.model import POLICY_TITLES

FORMAT = "gpuledger.whatif.outcome/1"
TARGET_NOTE = ("targets (issue 34, medians over seeds): the worst team's worst seed ≥ 0.93 too; occupancy never "
               "below the baselines'; burst ≥ 0.15 where demand is seasonal, ~0 under slot limits; debug p90 "
               "wait ≤ 60 s against hours in the baselines")


class Figure(NamedTuple):
    key: str
    label: str  # with its unit
    kind: str  # ratio / count / seconds / gpu_hours
    target: str = ""  # issue 34's target, as text ("" when none)


FIGURES = (
    Figure("delivery_ratio", "aggregate delivered ÷ owed", "ratio", "≥ 0.98"),
    Figure("teams_at_95", "teams at ≥ 0.95 of owed", "count", "all"),
    Figure("teams_owed", "teams owed anything", "count"),
    Figure("worst_delivery_ratio", "worst team delivered ÷ owed", "ratio", "≥ 0.95"),  # and its worst seed ≥ 0.93
    Figure("delivery_ratio_carried", "aggregate delivered ÷ owed, shortfalls carried", "ratio"),
    Figure("worst_delivery_ratio_carried", "worst team, shortfalls carried", "ratio"),
    Figure("occupancy_ratio", "occupancy (allocated ÷ installed)", "ratio", "≥ 0.97"),  # and ≥ the baselines'
    Figure("burst_ratio", "burst: GPU-h above owed ÷ allocated", "ratio", "≥ 0.15"),  # slot limits ~0
    Figure("wait_p50_seconds_debug", "wait p50 debug jobs", "seconds"),
    Figure("wait_p90_seconds_debug", "wait p90 debug jobs", "seconds", "≤ 60 s"),
    # the bound below debug jobs' waits (metrics: a pool wholly held by exempt or protected work)
    Figure("wait_p90_seconds_debug_forced", "debug p90 wait the rules force", "seconds"),
    Figure("jobs_debug_forced", "debug jobs held by the rules on arrival", "count"),
    *(Figure(f"wait_p{q}_seconds_{c}", f"wait p{q} {c} jobs", "seconds") for c in WAIT_CLASSES if c != "debug"
      for q in (50, 90)),
    Figure("sessions_given_up", f"sessions given up (not started, or restarted, in {SESSION_PATIENCE_S} s)", "count"),
    Figure("preemptions", "preemptions", "count"),
    Figure("lost_gpu_hours", "GPU-h lost to preemptions", "gpu_hours"),
    Figure("squatted_gpu_hours", "squatted GPU-h (idle past grace)", "gpu_hours"),
    Figure("reclaimed_gpu_hours", "squatted GPU-h reclaimed", "gpu_hours"),
    Figure("ceiling_delivery_ratio", "ceiling of delivered ÷ owed (owed vs occupied, per week)", "ratio"),
    Figure("exempt_above_owed_gpu_hours", "exempt GPU-h above their team's owed (per week)", "gpu_hours"),
    Figure("ceiling_exempt_delivery_ratio", "ceiling with exempt work where it ran (per week)", "ratio"),
    Figure("teams_reachable_95", "teams whose own ceiling reaches 0.95 (their pools, per week)", "count"),
    Figure("worst_team_ceiling", "worst team's own ceiling (its pools, exempt work where it ran, per week)", "ratio"),
)


def spread(runs: dict[int, dict[str, dict]], key: str, policy: str) -> dict | None:
    """{min, median, max} of ``key`` over the seeds' summaries of ``policy`` (``runs``: seed ->
    policy -> summary); seeds without the figure (None) left out; None when none has it."""
    values = [float(v) for s in runs.values() if (v := s.get(policy, {}).get(key)) is not None]
    if not values:
        return None
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def rows(runs: dict[int, dict[str, dict]], policies: tuple[str, ...]) -> list[dict]:
    """One row per figure: {figure, label, kind, target, <policy>: {min, median, max} | None}."""
    return [
        {"figure": f.key, "label": f.label, "kind": f.kind, "target": f.target,
         **{p: spread(runs, f.key, p) for p in policies}}
        for f in FIGURES
        if any(spread(runs, f.key, p) is not None for p in policies)
    ]


def duration(seconds: float) -> str:
    """A wait as people say it: ``45 s``, ``38 min``, ``1.8 h`` (Ai2: "5 min → 24 s")."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:,.1f} h"


def cell(value: dict | None, kind: str, ranges: bool = True) -> str:
    """``median [min–max]`` (one seed, or ``ranges`` false: the median alone), in the figure's unit."""
    if value is None:
        return "-"
    if kind == "seconds":
        fmt = duration
    else:
        pattern = {"ratio": "{:.3f}", "count": "{:,.0f}", "gpu_hours": "{:,.1f}"}[kind]
        if kind == "count" and value["median"] != int(value["median"]):
            pattern = "{:,.1f}"
        fmt = pattern.format
    med = fmt(value["median"])
    if value["min"] == value["max"] or not ranges:
        return med
    return f"{med} [{fmt(value['min'])}–{fmt(value['max'])}]"


def table_frame(outcome_rows: list[dict], policies: tuple[str, ...], ranges: bool = True):
    """The table as text cells: figure (unit) | target | one column per policy (``ranges`` false:
    medians alone). A figure this code knows takes its label and target from :data:`FIGURES` (a
    file keeps its numbers, the words follow the code); another keeps the file's."""
    known = {f.key: f for f in FIGURES}
    return pl.DataFrame(
        {
            "label": [known[r["figure"]].label if r["figure"] in known else r["label"] for r in outcome_rows],
            "target": [known[r["figure"]].target if r["figure"] in known else r["target"] for r in outcome_rows],
            **{p: [cell(r.get(p), known[r["figure"]].kind if r["figure"] in known else r["kind"], ranges)
                   for r in outcome_rows] for p in policies},
        },
        schema={"label": pl.String, "target": pl.String, **dict.fromkeys(policies, pl.String)},
    )


def document(runs: dict[int, dict[str, dict]], policies: tuple[str, ...], *, sources: dict[int, str],
             regime: str) -> dict:
    """The ``outcome`` block of a what-if result file: seeds, where each came from, the regime, the
    rows, and per seed and policy the settlement periods (for the ceiling)."""
    return _rounded({
        "format": FORMAT,
        "seeds": sorted(runs),
        "sources": {str(k): v for k, v in sorted(sources.items())},
        "regime": regime,
        "policies": list(policies),
        "titles": {p: POLICY_TITLES[p] for p in policies},
        "rows": rows(runs, policies),
        "settlement": {
            str(seed): {p: runs[seed][p].get("settlement", []) for p in policies if p in runs[seed]}
            for seed in sorted(runs)
        },
    })


def _rounded(value):
    """Floats to 6 decimals, all the way down: polars sums in parallel, so a sum's last bits may
    differ between runs (compare._rounded, for nested values)."""
    if isinstance(value, float):
        return round(value, 6)
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_rounded(v) for v in value]
    return value


def frame_from_document(doc: dict, ranges: bool = True):
    """The dashboard's reader: (table frame, policies, titles) of an ``outcome`` block."""
    if doc.get("format") != FORMAT:
        raise ValueError(f"not a what-if outcome block (format {doc.get('format')!r}, expected {FORMAT!r})")
    policies = tuple(doc["policies"])
    return table_frame(doc["rows"], policies, ranges), policies, doc.get("titles", {})
