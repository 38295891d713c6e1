"""The scheduler's own reason for a waiting job, kept as a change log (migration 027).

Sources: Slurm's ``Reason`` (sacct's field for a pending job; ``scontrol show job``'s ``Reason=``)
and a Kueue Workload's ``QuotaReserved`` condition (its reason and message while it waits, the
admission checks' states, and the admission itself at the condition's transition time). A row is
written only when the job's reason or message differs from the one stored last before it, so
re-reading an unchanged queue adds nothing and the table says when each reason began.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import duckdb

from gpuledger.sql import load_sql

SLURM, KUEUE = "slurm", "kueue"
ADMITTED = "QuotaReserved"  # a Kueue row with this reason: the Workload was admitted then (its wait ended)
# Slurm's reasons that mean "nothing holds it": no row is kept for them
NO_REASON = frozenset({"", "none", "(null)"})


@dataclass(frozen=True)
class SchedulerReason:
    cluster: str
    job_id: str
    observed_at: datetime  # naive UTC
    scheduler: str  # slurm / kueue
    state: str | None
    reason: str
    message: str | None
    source: str  # sacct / scontrol / kubernetes


def record_reasons(con: duckdb.DuckDBPyConnection, reasons: list[SchedulerReason]) -> int:
    """Store the reasons that are news (see the module docstring); returns rows written. Needs
    migration 027 (a warehouse without the table stores nothing and says 0)."""
    rows = [r for r in reasons if (r.reason or "").strip().lower() not in NO_REASON]
    if not rows or not con.execute("SELECT count(*) FROM information_schema.tables "
                                   "WHERE table_name = 'scheduler_reasons'").fetchall()[0][0]:
        return 0
    before = con.execute("SELECT count(*) FROM scheduler_reasons").fetchall()[0][0]
    con.execute("CREATE OR REPLACE TEMP TABLE _reasons_in (cluster VARCHAR, job_id VARCHAR, observed_at TIMESTAMP, "
                "scheduler VARCHAR, state VARCHAR, reason VARCHAR, message VARCHAR, source VARCHAR)")
    con.executemany("INSERT INTO _reasons_in VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    [(r.cluster, r.job_id, r.observed_at, r.scheduler, r.state, r.reason.strip(), r.message,
                      r.source) for r in rows])
    con.execute(load_sql(__package__, "scheduler_reasons_insert.sql"))
    con.execute("DROP TABLE _reasons_in")
    return con.execute("SELECT count(*) FROM scheduler_reasons").fetchall()[0][0] - before
