"""The lifecycle of squatting findings across evaluations: pure, no I/O.

An *episode* is a job found idle from one evaluation (``first_seen``) until the first evaluation
that no longer finds it (``resolved_at``). Given the episodes still open and the findings of a new
evaluation at ``now`` (``squatting.squatting_findings`` / ``queries.squatters_report`` output):

* a finding for a job with no open episode opens one (event ``opened``);
* a finding for a job with an open episode continues it (``last_seen`` = now, latest evidence),
  with a ``severity-changed`` event when its finding or severity differ from the episode's;
* an open episode with no finding is resolved (``resolved_at`` = now, event ``resolved``).
"""

from __future__ import annotations

from datetime import datetime

import polars as pl

KEY = ["cluster", "job_id"]
EVIDENCE = ["project", "user_name", "namespace", "job_kind", "finding", "severity", "gpus_total", "gpus_idle",
            "idle_since", "idle_minutes", "gpu_hours_idle", "idle_cost", "currency", "fb_used_bytes_idle",
            "activity_signal"]
EPISODE = [*KEY, "first_seen", "last_seen", "resolved_at", *EVIDENCE]
EVENT = [*KEY, "first_seen", "event_time", "event", "finding", "severity", "idle_minutes"]


def advance_lifecycle(open_episodes: pl.DataFrame, findings: pl.DataFrame, *, now: datetime
                      ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(episodes, events): every episode that was open, continued or resolved at ``now``, plus the
    newly opened ones (columns :data:`EPISODE`), and the events of this evaluation (:data:`EVENT`).
    ``open_episodes`` has at least :data:`EPISODE` columns, one row per (cluster, job_id)."""
    ts = pl.lit(now).cast(pl.Datetime("us"))
    current = findings.select(*KEY, *EVIDENCE)
    was = open_episodes.select(*KEY, "first_seen", pl.col("finding").alias("_was_finding"),
                               pl.col("severity").alias("_was_severity"))
    continued = current.join(was, on=KEY, how="inner")
    opened = current.join(was, on=KEY, how="anti").with_columns(first_seen=ts)
    resolved = open_episodes.join(current.select(KEY), on=KEY, how="anti")

    episodes = pl.concat([
        continued.with_columns(last_seen=ts, resolved_at=pl.lit(None, pl.Datetime("us"))).select(EPISODE),
        opened.with_columns(last_seen=ts, resolved_at=pl.lit(None, pl.Datetime("us"))).select(EPISODE),
        resolved.with_columns(resolved_at=ts).select(EPISODE),
    ], how="vertical_relaxed")
    changed = continued.filter((pl.col("finding") != pl.col("_was_finding"))
                               | (pl.col("severity") != pl.col("_was_severity")))
    events = pl.concat([
        opened.with_columns(event=pl.lit("opened")),
        changed.with_columns(event=pl.lit("severity-changed")),
        resolved.with_columns(event=pl.lit("resolved")),
    ], how="diagonal_relaxed").with_columns(event_time=ts)
    if events.height == 0:
        events = pl.DataFrame(schema={c: pl.String for c in EVENT}).with_columns(
            pl.col("first_seen", "event_time").cast(pl.Datetime("us")), pl.col("idle_minutes").cast(pl.Float64))
    return episodes.sort(KEY), events.select(EVENT).sort([*KEY, "event"])
