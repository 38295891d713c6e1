"""Issue 14's targets evaluated from the numbers in bench/results.json (pure: results in, rows out).
A target whose figure is absent is listed as not measured (met: null), never as met."""

from __future__ import annotations

QUESTION_SPEEDUP = 20.0      # gpuledger's warm path >= 20x faster than Prometheus, answers agreeing
CLI_OVER_FLOOR = 3.0         # issue 41: each question through the CLI <= 3x a bare `import typer`
CLI_SPEEDUP = 5.0            # issue 41: and >= 5x faster than its PromQL, where any process start can be
FULL_LIMITS = {"1024": (1.0, 2 * 1024), "4096": (5.0, 8 * 1024)}   # seconds, MiB
INCREMENTAL_LIMIT = {"1024": 0.1}                                  # seconds
FULL_VS_SCAN_LIMIT = 20.0
INGEST_PER_CORE = 1_000_000  # samples/s/core, exposition text -> warehouse
DASHBOARD_WARM_LIMIT = 2.0   # issue 12: each page under 2 s after the first load
BROWSER_LIMITS = {"1024": {"repeat": 1.0, "first": 2.0}}  # issue 23: in Chromium, seconds


def _num(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _at_most(target: str, measured, limit: float, unit: str, section: str) -> dict:
    m = _num(measured)
    return {"target": target, "measured": m, "limit": limit, "unit": unit, "section": section, "at": "most",
            "met": None if m is None else m <= limit,
            "factor": None if m is None or limit == 0 else round(m / limit, 3)}


def _at_least(target: str, measured, limit: float, unit: str, section: str) -> dict:
    m = _num(measured)
    return {"target": target, "measured": m, "limit": limit, "unit": unit, "section": section, "at": "least",
            "met": None if m is None else m >= limit,
            "factor": None if m is None or limit == 0 else round(m / limit, 3)}


def speedup(fig: dict) -> float | None:
    """Prometheus seconds over gpuledger's warm seconds, computed here so the direction is certain;
    the script's own "ratio" only when one of the two times is absent."""
    prom, ours = _num(fig.get("prometheus_s")), _num(fig.get("gpuledger_s"))
    if prom is not None and ours:
        return prom / ours
    return _num(fig.get("ratio"))


def speedup_reachable(prometheus_s: float, floor_s: float) -> bool:
    """Whether "PromQL >= 5x the CLI" can be met at all: the CLI is a process start, never quicker than
    the floor (a bare `import typer`), so 5x needs the PromQL above 5x the floor. Issue 41 exempts a
    PromQL under the floor (idle_60m's 12 ms at 256 GPUs); one between the floor and 5x it would ask
    for a CLI answering before its own process has started just the same (session 18's decision:
    such a row is "unreachable", judged by the <= 3x-floor target alone)."""
    return prometheus_s > CLI_SPEEDUP * floor_s


def cli_targets(question: str, size: str, fig: dict) -> list[dict]:
    """Issue 41's two targets for one question through the CLI as the user waits (medians of runs
    alternated with the floor): none when the CLI was not timed; the PromQL one only where the
    PromQL takes longer than 5x the floor (:func:`speedup_reachable`)."""
    cli, floor, prom = _num(fig.get("cli_s")), _num(fig.get("floor_s")), _num(fig.get("prometheus_s"))
    if cli is None or not floor:
        return []
    at = f"{question} at {int(size):,} GPUs"
    rows = [_at_most(f"CLI end to end, {at}: <= 3x a bare `import typer`", cli / floor, CLI_OVER_FLOOR, "x",
                     f"questions/{size}")]
    if prom is not None and speedup_reachable(prom, floor) and cli:
        rows.append(_at_least(f"CLI end to end, {at}: PromQL (over 5x the floor) >= 5x the CLI", prom / cli,
                              CLI_SPEEDUP, "x", f"questions/{size}"))
    return rows


def evaluate(results: dict) -> list[dict]:
    """One row per target and size: target, measured, limit, unit, met (true / false / null when not
    measured), factor (measured / limit: above 1 misses an "at most", below 1 an "at least")."""
    rows = []
    if not results.get("questions"):
        rows.append(_at_least("each question: gpuledger warm path >= 20x faster than Prometheus, answers "
                              "agreeing", None, QUESTION_SPEEDUP, "x", "questions"))
    for size in sorted(results.get("questions") or {}, key=int):
        for question, fig in sorted(results["questions"][size].items()):
            row = _at_least(f"{question} at {int(size):,} GPUs: gpuledger warm path >= 20x faster than "
                            "Prometheus, answers agreeing", speedup(fig), QUESTION_SPEEDUP, "x",
                            f"questions/{size}")
            row["agree"] = fig.get("agree")
            if row["met"] is not None and fig.get("agree") is not True:
                row["met"] = False  # fast but disagreeing (or agreement unknown) is not met
            rows.append(row)
            rows += cli_targets(question, size, fig)
    analytics = results.get("analytics") or {}
    for size, (seconds, mib) in FULL_LIMITS.items():
        fig = analytics.get(size, {})
        rows.append(_at_most(f"full 7-day recompute at {int(size):,} GPUs <= {seconds:g} s",
                             fig.get("full_recompute_s"), seconds, "s", f"analytics/{size}"))
        rows.append(_at_most(f"full 7-day recompute at {int(size):,} GPUs <= {mib // 1024} GiB peak RSS",
                             fig.get("peak_rss_mib"), mib, "MiB", f"analytics/{size}"))
    for size, seconds in INCREMENTAL_LIMIT.items():
        rows.append(_at_most(f"incremental 5-minute update at {int(size):,} GPUs <= {seconds:g} s",
                             analytics.get(size, {}).get("incremental_s"), seconds, "s", f"analytics/{size}"))
    for size in sorted(set(analytics) | {"256", "1024", "4096"}, key=int):
        fig = analytics.get(size, {})
        full, scan = _num(fig.get("full_recompute_s")), _num(fig.get("scan_floor_s"))
        ratio = full / scan if full is not None and scan else _num(fig.get("full_vs_scan"))
        rows.append(_at_most(f"full recompute at {int(size):,} GPUs within 20x of the bare scan", ratio,
                             FULL_VS_SCAN_LIMIT, "x", f"analytics/{size}"))
    ingest = results.get("ingest") or {}
    ingest_rows = [("end_to_end_samples_per_s_per_core", "one text of 10,240 GPUs")]  # listed measured or not
    if "scrape_round_samples_per_s_per_core" in ingest:  # results of before the round was timed lack it
        ingest_rows.append(("scrape_round_samples_per_s_per_core", "a scrape round of node pages, as `ingest scrape`"))
    for key, how in ingest_rows:
        rows.append(_at_least(f"ingest >= 1 M samples/s/core, exposition text -> warehouse ({how})",
                              ingest.get(key), INGEST_PER_CORE, "samples/s/core", "ingest"))
    for size in sorted(results.get("dashboard") or {}, key=int):
        warm = {page: _num(fig.get("warm_s")) for page, fig in results["dashboard"][size].items()
                if isinstance(fig, dict)}
        measured = [(w, page) for page, w in warm.items() if w is not None]
        slowest = max(measured) if measured else (None, None)
        row = _at_most(f"every dashboard page at {int(size):,} GPUs < 2 s after the first load (issue 12; "
                       "the slowest page)", slowest[0], DASHBOARD_WARM_LIMIT, "s", f"dashboard/{size}")
        row["page"] = slowest[1]
        if None in warm.values():
            row["met"] = None  # a page without a figure may be the slow one
        rows.append(row)
    browser = results.get("browser") or {}
    for size, limits in BROWSER_LIMITS.items():
        pages = (browser.get(size) or {}).get("pages") or {}
        for load, limit in limits.items():
            measured = [(_num((fig.get(load) or {}).get("s")), page) for page, fig in pages.items()]
            known = [(s, page) for s, page in measured if s is not None]
            slowest = max(known) if known else (None, None)
            what = "reload (repeat)" if load == "repeat" else "first load"
            row = _at_most(f"Chromium: every dashboard page at {int(size):,} GPUs, {what} <= {limit:g} s "
                           "(issue 23; the slowest page)", slowest[0], limit, "s", f"browser/{size}")
            row["page"] = slowest[1]
            if len(known) < len(measured):
                row["met"] = None
            rows.append(row)
    return rows
