"""Policies side by side, parameter sweeps, and the JSON file the dashboard page `/what-if` reads.

:func:`compare` runs the policies on one trace; :func:`side_by_side` turns the summaries into
frames (a metric per row, a policy per column; delivery per project and policy; waits per class
and policy); :func:`to_json` / :func:`frames_from_json` write and read the file format
``gpuledger.whatif.schedule/1``::

    {"format": "gpuledger.whatif.schedule/1",
     "trace": {"start", "end", "hours", "jobs", "physical_gpus", "skipped", "activity_from_samples"},
     "params": {...},                        # model.Params
     "policies": [{"policy", "title", "summary": {metric: value}, "projects": [{project, ...}]}],
     "sweep": null | {"parameter", "policy", "rows": [{"value", metric: value, ...}]}}

Every metric name carries its unit (``_gpu_hours``, ``_ratio``, ``_hours``) or is a count.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, fields
from datetime import timedelta

import polars as pl

from gpuledger.reports.chart import stacked_bars
from gpuledger.rules.clock import iso_z
from gpuledger.whatif import metrics
from gpuledger.whatif.engine import effective_policy, exempt_rule, org_nodes_frame, simulate
from gpuledger.whatif.model import ALL_POLICIES, POLICY_TITLES, Params, Trace

FORMAT = "gpuledger.whatif.schedule/1"

# (metric, label with its unit) in the order the table shows them
SUMMARY_ROWS = (
    ("worst_delivery_ratio", "worst project delivered ÷ owed"),
    ("worst_project", "worst project"),
    ("delivery_ratio", "all projects delivered ÷ owed"),
    ("worst_delivery_ratio_hourly", "worst project delivered ÷ owed, hour by hour"),
    ("delivery_ratio_hourly", "all projects delivered ÷ owed, hour by hour"),
    ("occupancy_ratio", "occupancy (allocated ÷ installed)"),
    ("useful_gpu_hours", "useful (active, kept) GPU-h"),
    ("allocated_gpu_hours", "allocated GPU-h"),
    ("wait_p50_hours_small", "wait p50 small debug jobs, h"),
    ("wait_p90_hours_small", "wait p90 small debug jobs, h"),
    ("wait_p50_hours_medium", "wait p50 medium jobs, h"),
    ("wait_p90_hours_medium", "wait p90 medium jobs, h"),
    ("wait_p50_hours_large", "wait p50 large jobs (≥ 8 GPUs), h"),
    ("wait_p90_hours_large", "wait p90 large jobs (≥ 8 GPUs), h"),
    ("preemptions", "preemptions"),
    ("lost_gpu_hours", "GPU-h lost to preemptions"),
    ("squatted_gpu_hours", "squatted GPU-h"),
    ("squatters_reclaimed", "squatters reclaimed"),
    ("jobs_done", "jobs done"),
)
SWEEPABLE = (
    "window_days",
    "half_life_days",
    "min_runtime_cap_hours",
    "idle_threshold_ratio",
    "checkpoint_interval_minutes",
    "cycle_minutes",
    "delivery_balance",
    "lane_reserve_share",
    "shares",
)


def settle_period(usage) -> timedelta:
    """The period delivery is settled over: the usage window W (design.md: Ai2's sort key and the
    delivery ratio are figures of the window), in either usage mode."""
    return timedelta(days=usage.window_days)


def compare(
    trace: Trace,
    cfg,
    params: Params | None = None,
    policies: tuple[str, ...] = ALL_POLICIES,
    progress: Callable[[str, float], None] | None = None,
) -> list[tuple[dict, object]]:
    """[(summary, delivery frame)] per policy, in the order asked."""
    params = params or Params()
    org = org_nodes_frame(cfg, params)
    usage, _, squatting = effective_policy(cfg, params)
    settle = settle_period(usage)
    out = []
    for policy in policies:
        tick = (lambda f, p=policy: progress(p, f)) if progress else None
        result = simulate(trace, cfg, policy, params, progress=tick)
        out.append(metrics.summarize(result, org, squatting, settle, exempt=exempt_rule(cfg)))
    return out


def side_by_side(runs: list[tuple[dict, object]]) -> dict:
    """{"summary": metric × policy, "projects": project × policy delivery, "waits": class × policy}
    as polars DataFrames (the dashboard's frames)."""
    names = [s["policy"] for s, _ in runs]
    summary = pl.DataFrame(
        {
            "metric": [m for m, _ in SUMMARY_ROWS],
            "label": [label for _, label in SUMMARY_ROWS],
            **{p: [_cell(s.get(m)) for m, _ in SUMMARY_ROWS] for p, (s, _) in zip(names, runs, strict=True)},
        }
    )
    projects = None
    for p, (_, deliv) in zip(names, runs, strict=True):
        part = deliv.select(
            "project",
            pl.col("gpu_hours_owed").alias(f"{p}_owed_gpu_hours"),
            pl.col("gpu_hours_delivered").alias(f"{p}_delivered_gpu_hours"),
            pl.col("delivery_ratio").alias(f"{p}_delivery_ratio"),
        )
        projects = part if projects is None else projects.join(part, on="project", how="full", coalesce=True)
    waits = pl.DataFrame(
        [
            {
                "policy": s["policy"],
                "job_class": c,
                "jobs": s[f"jobs_{c}"],
                "jobs_started": s[f"jobs_started_{c}"],
                "wait_p50_hours": s[f"wait_p50_hours_{c}"],
                "wait_p90_hours": s[f"wait_p90_hours_{c}"],
            }
            for s, _ in runs
            for c in (metrics.SMALL, metrics.MEDIUM, metrics.LARGE)
        ]
    )
    return {
        "summary": summary,
        "projects": projects.sort("project") if projects is not None else None,
        "waits": waits,
    }


def _cell(v):
    if isinstance(v, float):
        return f"{v:.3f}" if abs(v) < 10 else f"{v:,.1f}"
    return "-" if v is None else str(v)


def sweep(
    trace: Trace,
    cfg,
    parameter: str,
    values: list,
    *,
    policy: str,
    params: Params | None = None,
    progress: Callable[[str, float], None] | None = None,
) -> list[dict]:
    """One run per value of ``parameter`` (a Params field, or ``shares``: values are
    ``node:shares`` override lists); rows of the value and the headline figures."""
    if parameter not in SWEEPABLE:
        raise ValueError(f"cannot sweep {parameter!r}: choose one of {', '.join(SWEEPABLE)}")
    base = params or Params()
    rows = []
    for value in values:
        p = (
            base.with_(share_overrides=tuple(value))
            if parameter == "shares"
            else base.with_(**{parameter: value})
        )
        label = ",".join(f"{n}:{s:g}" for n, s in value) if parameter == "shares" else value
        ((summary, _),) = compare(
            trace,
            cfg,
            p,
            (policy,),
            progress=(lambda pol, f, v=label: progress(f"{parameter}={v}", f)) if progress else None,
        )
        rows.append(
            {
                "value": label,
                **{
                    k: summary[k]
                    for k in (
                        "worst_delivery_ratio",
                        "worst_project",
                        "delivery_ratio",
                        "occupancy_ratio",
                        "useful_gpu_hours",
                        "wait_p90_hours_small",
                        "wait_p90_hours_large",
                        "preemptions",
                        "lost_gpu_hours",
                        "squatted_gpu_hours",
                    )
                },
            }
        )
    return rows


def to_json(
    trace: Trace,
    params: Params,
    runs: list[tuple[dict, object]],
    sweep_rows: list[dict] | None = None,
    *,
    sweep_parameter: str | None = None,
    sweep_policy: str | None = None,
    outcome: dict | None = None,
) -> str:
    end = trace.origin + timedelta(seconds=trace.horizon_s)
    doc = {
        "format": FORMAT,
        "trace": {
            "start": iso_z(trace.origin),
            "end": iso_z(end),
            "hours": trace.horizon_s / 3600,
            "jobs": len(trace.jobs),
            "physical_gpus": trace.inventory.physical_gpus(),
            "activity_from_samples": sum(j.activity_source == "samples" for j in trace.jobs),
            "seed": trace.seed,
            "work_drawn": sum(j.work_source != "recorded" for j in trace.jobs),
            "skipped": [{"job_id": j, "reason": r} for j, r in trace.skipped],
        },
        "params": {f.name: _plain(getattr(params, f.name)) for f in fields(params)},
        "policies": [
            {
                "policy": s["policy"],
                "title": POLICY_TITLES[s["policy"]],
                "summary": _rounded({k: v for k, v in s.items() if k != "settlement"}),
                "projects": [_rounded(r) for r in d.to_dicts()],
            }
            for s, d in runs
        ],
        "sweep": None
        if sweep_rows is None
        else {
            "parameter": sweep_parameter,
            "policy": sweep_policy,
            "rows": [_rounded(r) for r in sweep_rows],
        },
    }
    if outcome is not None:
        doc["outcome"] = outcome
    return json.dumps(doc, indent=1, sort_keys=False, default=str) + "\n"


def _rounded(d: dict) -> dict:
    """Floats to 6 decimals: polars sums in parallel, so the last bits of a sum may differ between
    runs; six decimals of a GPU-hour or a ratio are far below what any figure means."""
    return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in d.items()}


def _plain(v):
    if isinstance(v, tuple):
        return [_plain(x) for x in v]
    return v


def frames_from_json(text: str) -> dict:
    """The dashboard's reader: the frames of :func:`side_by_side` (plus ``sweep`` when the file has
    one) from a file written by :func:`to_json`."""
    doc = json.loads(text)
    if doc.get("format") != FORMAT:
        raise ValueError(f"not a what-if schedule file (format {doc.get('format')!r}, expected {FORMAT!r})")
    runs = [(p["summary"], pl.DataFrame(p["projects"], infer_schema_length=None)) for p in doc["policies"]]
    out = side_by_side(runs)
    out["sweep"] = pl.DataFrame(doc["sweep"]["rows"]) if doc.get("sweep") else None
    out["trace"] = doc["trace"]
    return out


__all__ = ["FORMAT", "asdict", "compare", "frames_from_json", "side_by_side", "sweep", "to_json"]


def sweep_chart(rows: list[dict], parameter: str, policy: str) -> str:
    """An SVG bar chart of a sweep: the worst project's and all projects' delivered ÷ owed per
    value (deterministic bytes, gpuledger.reports.chart)."""
    worst = stacked_bars(
        f"{parameter} sweep ({policy}): worst project delivered ÷ owed",
        [f"{parameter}={r['value']}" for r in rows],
        [("worst project, ratio", [float(r["worst_delivery_ratio"] or 0.0) for r in rows])],
        unit="ratio",
    )
    return worst
