"""Crash recovery at daemon start: runs a killed daemon left STARTED are failed and retried at once.

With the default run launcher a run executes in a worker process below the daemon. When the
daemon's process group is killed (OOM, a node restart, `kill -9`), its runs stay STARTED in the
run storage; run monitoring would fail them only at their ``dagster/max_runtime`` (minutes to
hours), and until then a dead writing run holds the one ``gpuledger/warehouse: write`` slot, so
every writing job waits. Before ``dagster-daemon run`` starts, this module finds each STARTED /
STARTING / CANCELING run whose worker process no longer exists (its PID, from the run's "Started
process for run (pid: N)" event, gone or reused by another program) and fails it, tagged so the
run-retry daemon relaunches it once (``dagster/max_retries`` one above its retry number).
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

MAX_RETRIES_TAG = "dagster/max_retries"
RETRY_NUMBER_TAG = "dagster/retry_number"


@dataclass(frozen=True)
class Recovered:
    run_id: str
    job_name: str
    pid: int | None


def worker_pid(instance, run_id: str) -> int | None:
    """The run worker's PID from its engine events ("Started process for run (pid: N)"), or None
    (the worker never started)."""
    import dagster as dg  # lazy: optional extra gpuledger[pipelines]

    records = instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.ENGINE_EVENT).records
    for record in reversed(records):
        event = record.event_log_entry.dagster_event
        data = getattr(event, "event_specific_data", None) if event else None
        pid = getattr(data, "metadata", {}).get("pid") if data is not None else None
        if pid is not None:
            try:
                return int(getattr(pid, "value", pid))
            except (TypeError, ValueError):
                continue
    return None


def process_start_unix(pid: int, proc: Path = Path("/proc")) -> float | None:
    """When process ``pid`` started (Unix seconds), or None when there is no such process."""
    try:
        stat = (proc / str(pid) / "stat").read_text()
        boot = next(float(line.split()[1]) for line in (proc / "stat").read_text().splitlines()
                    if line.startswith("btime "))
    except (OSError, StopIteration, ValueError):
        return None
    fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) ": field 3 onwards
    return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22, starttime in clock ticks


def worker_alive(pid: int, run_started: float) -> bool:
    """Whether ``pid`` is still the worker that started the run at ``run_started`` (Unix s): the
    process exists and began no later than the run (the worker reports the start itself). A
    restarted container reuses low PIDs, so existence alone proves nothing; the run worker is a
    multiprocessing child whose command line does not name the run."""
    started = process_start_unix(pid)
    return started is not None and started <= run_started + 2.0  # /proc/stat's btime is whole seconds


def recover_dead_runs(instance, *, alive: Callable[[int, float], bool] = worker_alive,
                      log: Callable[[str], None] = print) -> list[Recovered]:
    """Fail (and mark for one retry) every in-flight run whose worker is gone. Returns them."""
    import dagster as dg  # lazy: optional extra gpuledger[pipelines]

    in_flight = [dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.CANCELING]
    recovered = []
    for record in instance.get_run_records(filters=dg.RunsFilter(statuses=in_flight)):
        run = record.dagster_run
        pid = worker_pid(instance, run.run_id)
        started = record.start_time or record.create_timestamp.timestamp()
        if pid is not None and alive(pid, started):
            continue  # a worker the killed daemon left running finishes by itself
        retry_number = int(run.tags.get(RETRY_NUMBER_TAG, "0") or 0)
        instance.add_run_tags(run.run_id, {MAX_RETRIES_TAG: str(retry_number + 1)})
        gone = f"worker PID {pid} no longer exists" if pid is not None else "its worker never started"
        instance.report_run_failed(
            instance.get_run_by_id(run.run_id),
            message=f"gpuledger: failed at daemon start ({gone}: the daemon was killed while it ran); "
                    "retried once by the run-retry daemon")
        log(f"recovered run {run.run_id} of {run.job_name}: {gone}; failed and queued for one retry")
        recovered.append(Recovered(run.run_id, run.job_name, pid))
    return recovered


def instance_error(exc: BaseException, home: str) -> str | None:
    """One line for a Dagster instance whose database cannot be opened (PostgreSQL unreachable,
    refused, or its schema half made), saying what to do; None for any other error."""
    import sqlalchemy.exc  # lazy: Dagster's dependency (gpuledger[pipelines]), as dagster below

    try:
        from dagster_postgres.utils import DagsterPostgresException  # its retries given up
    except ImportError:  # pragma: no cover - dagster-postgres comes with the pipelines extra
        DagsterPostgresException = sqlalchemy.exc.SQLAlchemyError
    if not isinstance(exc, (sqlalchemy.exc.SQLAlchemyError, DagsterPostgresException)):
        return None
    cause = exc.__cause__ if isinstance(exc, DagsterPostgresException) and exc.__cause__ else exc
    first = (str(getattr(cause, "orig", None) or cause).strip().splitlines() or [""])[0]
    return (f"the Dagster instance (DAGSTER_HOME={home}) could not open its database: {type(cause).__name__}: "
            f"{first}. Its schema is made by `dagster instance migrate` before the daemon and the webserver "
            "start (the pod's dagster-instance init container; gpuledger-migrate.service): run it once, then "
            "start the daemon again; if the database is unreachable, check DAGSTER_PG_HOST, DAGSTER_PG_PORT "
            "and the credentials")


def daemon_argv(module: str = "gpuledger.pipelines.definitions") -> list[str]:
    """What the wrapper execs: ``dagster-daemon run -m MODULE`` from this environment's bin."""
    exe = shutil.which("dagster-daemon", path=str(Path(sys.executable).parent)) or shutil.which("dagster-daemon")
    return [exe or "dagster-daemon", "run", "-m", module]


def exec_daemon(argv: list[str]) -> None:  # pragma: no cover - replaces the process
    os.execv(argv[0], argv)
