"""A job's class for wait times, by what the work is: the one rule the what-if's waits and the
real-history waits (``gpuledger report waits``) both ask.

Ai2 reports debug jobs' waits apart, so a debug job is short small work whatever its kind says (a
scheduler records a debug run as batch): kind ``debug``, or batch / unlabelled work of ≤ 1 GPU
submitted with a limit of ≤ 30 min — as its user declared it, whatever it then ran; with no
recorded limit, ≤ 30 min of work. Otherwise the kind decides: interactive (sessions), batch,
training (incl. fine-tunes), inference; a kind no rule names (a Slurm job carries none) is
``other``. Both forms (a Python function for one job, a polars expression over a frame) come from
the constants here; tests/rules/test_job_class.py runs them over the same jobs.
"""

from __future__ import annotations

import polars as pl

KIND_CLASSES = {
    "debug": "debug",
    "interactive": "interactive", "notebook": "interactive", "dev": "interactive",
    "batch": "batch", "eval": "batch",
    "training": "training", "fine-tune": "training", "pretrain": "training",
    "inference": "inference", "serving": "inference", "service": "inference",
}
WAIT_CLASSES = ("debug", "interactive", "batch", "training", "inference", "other")
DEBUG_MAX_GPUS = 1.0  # a debug job: at most one GPU ...
DEBUG_MAX_S = 1800  # ... for at most 30 min (its declared limit, else its work)
# A person opening a notebook session waits this long for it to start, then gives up: the session is
# cancelled without a start (zero-to-jupyterhub's singleuser.startTimeout default, 300 s). The
# simulated cluster's users (simulator/scheduler.py) and the what-if's replay (whatif/engine.py)
# both apply it to sessions (wait class interactive), so a replay drops what its policy does not
# start in time, as the recorded cluster did.
SESSION_PATIENCE_S = 300
_EPS = 1e-9


def wait_class(kind: str | None, gpus: float, time_limit_s: float | None, work_s: float | None) -> str:
    """The class of one job (see the module docstring); ``gpus`` in whole-GPU equivalents,
    ``time_limit_s`` the declared limit (None: none recorded), ``work_s`` the seconds it ran."""
    cls = KIND_CLASSES.get((kind or "").lower(), "other")
    short = work_s if time_limit_s is None else time_limit_s
    if (cls in ("batch", "other") and gpus <= DEBUG_MAX_GPUS + _EPS
            and short is not None and short <= DEBUG_MAX_S):
        return "debug"
    return cls


def patience_s(kind: str | None) -> int | None:
    """Seconds a job of ``kind`` waits to start before its user gives up (None: it waits on)."""
    return SESSION_PATIENCE_S if KIND_CLASSES.get((kind or "").lower()) == "interactive" else None


def wait_class_expr(kind: str = "kind", gpus: str = "gpus", time_limit_s: str = "time_limit_s",
                    work_s: str = "work_s") -> pl.Expr:
    """:func:`wait_class` over columns of a frame (``work_s`` NULL: the job has not run yet)."""
    cls = (pl.col(kind).cast(pl.String).str.to_lowercase()
           .replace_strict(KIND_CLASSES, default="other", return_dtype=pl.String).fill_null("other"))
    short = pl.coalesce(pl.col(time_limit_s).cast(pl.Float64), pl.col(work_s).cast(pl.Float64))
    debug = cls.is_in(["batch", "other"]) & (pl.col(gpus) <= DEBUG_MAX_GPUS + _EPS) & (short <= DEBUG_MAX_S)
    return pl.when(debug.fill_null(False)).then(pl.lit("debug")).otherwise(cls)
