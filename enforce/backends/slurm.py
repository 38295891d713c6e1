"""Slurm: ``scontrol update JobId=… Nice=…`` (and QOS on pending jobs where configured),
``scontrol update JobId=… AdminComment=…`` to warn, ``scontrol requeue`` or ``scancel`` to preempt,
``scontrol hold`` / ``scontrol release`` for a team lead's hold.

Priorities the scheduler keeps: Slurm's multifactor priority is Σ PriorityWeight* × factor (each
factor in 0..1) minus Nice. gpuledger reads the site's weights (``scontrol show config``) and
gives each of its priority steps more Nice than all of Slurm's own factors can add up to, so the
bands (exempt > funded > unfunded), the fair-share order of projects and the order inside a
project all survive any fair-share / age / QOS weights (``nice_for``). The Nice values are
negative (a higher priority), which Slurm allows to operators and root. Slurm refuses a QOS
change on a running job, so QOS is set only on pending ones.

Every command runs with a deadline (``timeout_s``): a controller that does not answer stops the
run with one line (BackendUnavailable) instead of hanging a cron job. Before a preemption the job
is read again (``live``): only a job still RUNNING, with the same submit time, restart count and
Requeue flag as the plan saw, is requeued or cancelled — a job that already ended, was requeued or
was replaced under a reused id is left alone (Slurm's ``scancel`` exits 0 for an ended job, so
the exit code alone proves nothing).
"""

from __future__ import annotations

import os
import re
import subprocess

from gpuledger.enforce.backends.base import (
    DONE,
    DRY_RUN,
    ERROR,
    SKIPPED,
    Backend,
    BackendUnavailable,
    CredentialError,
    Outcome,
)
from gpuledger.enforce.bands import EXEMPT_BASE, FUNDED_BASE, PROJECT_STEP, UNFUNDED_BASE
from gpuledger.enforce.model import ENDED, ENDED_STATES, HELD, REQUEUE, RUNNING, WAITING, Action

# 123, an array task 123_4, a pending array 123_[0-7%2] (as sacct lists it), a het component 123+1
_JOB_ID = re.compile(r"^\d+(?:_(?:\d+|\[[0-9,%\-]+\]))?(?:\+\d+)?$")
_WHOLE_JOB = re.compile(r"^(\d+)(?:_\[[0-9,%\-]+\]|\+\d+)$")
_PHASES = {"PENDING": WAITING, "REQUEUED": WAITING, "RUNNING": RUNNING, "CONFIGURING": RUNNING,
           "SUSPENDED": HELD, "REQUEUE_HOLD": HELD, "SPECIAL_EXIT": HELD, "RESV_DEL_HOLD": HELD}
_GPUS = re.compile(r"(?:^|,)gres/gpu=(\d+)(?:,|$)")
_GONE = ("Invalid job id", "Job has already finished", "already completing or completed")
_DENIED = ("Access/permission denied", "Permission denied", "Invalid user", "Authentication failure")
_DOWN = ("Unable to contact slurm controller", "Socket timed out", "Connection refused", "munge")
TIMEOUT_S = 30
#: The multifactor weights (scontrol show config) whose factors add to a job's priority.
WEIGHTS = ("PriorityWeightAge", "PriorityWeightAssoc", "PriorityWeightFairShare", "PriorityWeightJobSize",
           "PriorityWeightPartition", "PriorityWeightQOS")
MAX_NICE = 2_147_483_645  # scontrol's limit either way
MAX_FAIR = 400  # fair-share positions per band (policy: up to 399 projects fit below the next band)
MAX_WITHIN = 20  # distinct declared priorities kept apart inside one project


def _jid(action: Action) -> str:
    """The Slurm JobID a command names (``scheduler_job``; the row's job_id names one run of a
    requeued job). A pending array (``123_[0-7]``) is named by its array job id, which reaches all
    of its pending tasks, and a het-job component (``123+1``) by its leader, which reaches every
    component: scontrol and scancel act on the whole job either way."""
    jid = action.scheduler_job or action.job_id
    whole = _WHOLE_JOB.match(jid)
    return whole.group(1) if whole else jid


def weight_sum(config_text: str) -> int:
    """Σ of the site's PriorityWeight* (``scontrol show config`` text): the most Slurm's own
    factors can add to a job's priority."""
    total = 0
    for line in config_text.splitlines():
        key, _, value = line.partition("=")
        key, value = key.strip(), value.strip()
        if key in WEIGHTS and value.isdigit():
            total += int(value)
        elif key == "PriorityWeightTRES" and value not in ("", "(null)"):
            total += sum(int(float(w)) for w in re.findall(r"=(\d+(?:\.\d+)?)", value))
    return total


def config_value(config_text: str, key: str) -> str | None:
    """One ``Key = value`` of ``scontrol show config``."""
    for line in config_text.splitlines():
        k, _, value = line.partition("=")
        if k.strip() == key:
            return value.strip() or None
    return None


#: The largest Σ PriorityWeight* the layout keeps in order: each of its 3 × MAX_FAIR × MAX_WITHIN
#: steps must exceed every factor Slurm adds, within Slurm's Nice range.
MAX_WEIGHTS = MAX_NICE // (3 * MAX_FAIR * MAX_WITHIN) - 1


def nice_bound(weights: int) -> str | None:
    """Why ``weights`` (Σ PriorityWeight*) exceed what Nice can keep ordered, or None."""
    if weights <= MAX_WEIGHTS:
        return None
    return (f"this site's PriorityWeight* add up to {weights:,}, more than the {MAX_WEIGHTS:,} gpuledger's Nice "
            f"layout can keep ordered (Nice is at most {MAX_NICE:,}, shared by 3 bands x {MAX_FAIR} fair-share "
            f"positions x {MAX_WITHIN} positions in a project): Slurm's own factors may reorder jobs inside a band. "
            "Lower the weights (scontrol show config) or carry the bands by QOS "
            "(policy.enforcement.slurm_qos_funded / slurm_qos_unfunded)")


def step_for(weights: int) -> int:
    """Nice per gpuledger priority step: more than all of Slurm's factors together (so no step is
    undone by fair share, age or QOS), as far as Slurm's Nice range allows."""
    steps = 3 * MAX_FAIR * MAX_WITHIN
    return max(1, min(weights + 1, MAX_NICE // steps))


def nice_for(priority: int, step: int = 1) -> int:
    """Slurm Nice for a gpuledger priority: (band, fair-share position, position inside the
    project) as one offset × ``step``, negated (a higher priority, a lower Nice). The lowest
    unfunded job gets 0."""
    priority = int(priority)
    band, base = (2, EXEMPT_BASE) if priority >= EXEMPT_BASE else (1, FUNDED_BASE) if priority >= FUNDED_BASE \
        else (0, UNFUNDED_BASE)
    rest = max(priority - base, 0)
    fair = min(rest // PROJECT_STEP, MAX_FAIR - 1)
    within = min(rest % PROJECT_STEP, MAX_WITHIN - 1)
    return -((band * MAX_FAIR + fair) * MAX_WITHIN + within) * step


def job_view(fields: dict[str, str]) -> tuple[str, dict]:
    """(JobID as sacct lists it, the live view) of one ``scontrol show job -o`` line's fields: an
    array task ``12_3``, an array's pending tasks ``12_[0-7%2]``, a het component ``12+1``."""
    job_id = fields.get("JobId", "")
    task = fields.get("ArrayTaskId")
    if task and fields.get("ArrayJobId"):
        job_id = f"{fields['ArrayJobId']}_{task}" if task.isdigit() else f"{fields['ArrayJobId']}_[{task}]"
    elif fields.get("HetJobId") and fields.get("HetJobOffset"):
        job_id = f"{fields['HetJobId']}+{fields['HetJobOffset']}"
    restarts = fields.get("Restarts")
    state = fields.get("JobState")
    gpus = _GPUS.search(fields.get("ReqTRES") or fields.get("TRES") or "")
    return job_id, {"scheduler_job": job_id, "state": state, "phase": phase(state),
                    "submit_time": fields.get("SubmitTime"),
                    "restarts": int(restarts) if restarts and restarts.isdigit() else None,
                    "requeue_flag": fields.get("Requeue") == "1", "gpus": int(gpus.group(1)) if gpus else None,
                    "account": fields.get("Account"), "user": (fields.get("UserId") or "").split("(")[0] or None,
                    "qos": fields.get("QOS"), "reason": fields.get("Reason")}


def phase(state: str | None) -> str | None:
    """The phase (enforce.model) of a Slurm JobState."""
    state = (state or "").upper()
    if not state:
        return None
    return ENDED if state in ENDED_STATES else _PHASES.get(state, HELD)


def _fields(line: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in line.split():
        if "=" in part:
            key, _, value = part.partition("=")
            out.setdefault(key, value)
    return out


class SlurmBackend(Backend):
    name = "slurm"

    cluster_source = "ClusterName in scontrol show config"

    def __init__(self, *, scontrol: str = "scontrol", scancel: str = "scancel", env: dict | None = None,
                 qos_funded: str | None = None, qos_unfunded: str | None = None,
                 timeout_s: float = TIMEOUT_S, nice_step: int | None = None, cluster: str | None = None) -> None:
        # --cluster: every command goes to that cluster (-M, through slurmdbd), and its controller
        # must call itself that (ClusterName), else nothing is done
        self.cluster = cluster
        self.scontrol = [scontrol, "-M", cluster] if cluster else [scontrol]
        self.scancel = [scancel, "-M", cluster] if cluster else [scancel]
        self._config: str | None = None
        self.env = env
        self.qos_funded, self.qos_unfunded = qos_funded, qos_unfunded
        self.timeout_s = timeout_s
        self.nice_step = nice_step  # None: sized from the site's PriorityWeight* at the first priority

    def handles(self, action: Action) -> str | None:
        if (action.source and not action.source.startswith("slurm")) or not _JOB_ID.match(_jid(action)):
            return f"not a Slurm job (source {action.source or 'unknown'}, id {_jid(action)})"
        return None

    # --- reading ------------------------------------------------------------------------------
    def _read(self, command: list[str]) -> subprocess.CompletedProcess:
        """A read-only command with the deadline; the controller's silence is BackendUnavailable."""
        env = None if self.env is None else {**os.environ, **self.env}
        try:
            return subprocess.run(command, capture_output=True, text=True, timeout=self.timeout_s, env=env,
                                  check=False)
        except FileNotFoundError:
            raise BackendUnavailable(f"{command[0]}: not found; install the Slurm client tools or put them on "
                                     "PATH") from None
        except subprocess.TimeoutExpired:
            raise BackendUnavailable(f"{' '.join(command)}: no answer within {self.timeout_s:g} s; check slurmctld "
                                     "(scontrol ping) and munge on this host") from None

    def observe(self) -> dict[str, dict]:
        """Every job ``scontrol show job -o`` lists: state, submit time, restarts and its Requeue
        flag (Requeue=1: it may be requeued, so a preemption requeues it)."""
        done = self._read([*self.scontrol, "show", "job", "-o"])
        if done.returncode != 0:
            raise BackendUnavailable(f"scontrol show job: {done.stderr.strip() or done.returncode}")
        out = {}
        for line in done.stdout.splitlines():
            job_id, view = job_view(_fields(line))
            if job_id:
                out[job_id] = view
        return out

    def live(self, action: Action) -> dict | None:
        """The job as the scheduler shows it now, under the id sacct gave it: an array's or a het
        job's id lists every task or component, and only the one the plan judged is its view."""
        done = self._read([*self.scontrol, "show", "job", "-o", _jid(action)])
        text = (done.stderr or "") + (done.stdout or "")
        if done.returncode != 0:
            if any(s in text for s in _GONE):
                return None
            raise BackendUnavailable(f"scontrol show job {_jid(action)}: {done.stderr.strip() or done.returncode}")
        views = dict(job_view(_fields(line)) for line in done.stdout.splitlines() if line.strip())
        wanted = action.scheduler_job or action.job_id
        if wanted in views:
            return views[wanted]
        return next(iter(views.values())) if len(views) == 1 and _jid(action) == wanted else None

    def config(self) -> str:
        """``scontrol show config`` of the cluster this backend talks to (read once)."""
        if self._config is None:
            done = self._read([*self.scontrol, "show", "config"])
            if done.returncode != 0:
                raise BackendUnavailable(f"{' '.join(self.scontrol)} show config: "
                                         f"{done.stderr.strip() or done.returncode}")
            self._config = done.stdout
        return self._config

    def cluster_name(self) -> str:
        """The controller's own ClusterName; with --cluster, it must be that one."""
        name = config_value(self.config(), "ClusterName")
        if not name:
            raise BackendUnavailable("scontrol show config lists no ClusterName: cannot tell which cluster's jobs "
                                     "this is; pass --cluster NAME")
        if self.cluster and name != self.cluster:
            raise BackendUnavailable(f"--cluster {self.cluster}: the controller reached says ClusterName = {name}; "
                                     "nothing is done (check -M / SLURM_CONF)")
        return name

    def step(self) -> int:
        """Nice per priority step for this site (its PriorityWeight*)."""
        if self.nice_step is None:
            self.nice_step = step_for(weight_sum(self.config()))
        return self.nice_step

    def bound(self) -> str | None:
        """Why this site's weights exceed what the Nice layout keeps ordered, with what to do; None
        when every band, project and position stays apart."""
        return nice_bound(weight_sum(self.config()))

    # --- the verbs ------------------------------------------------------------------------------
    def set_priority(self, action: Action, *, dry_run: bool) -> Outcome:
        nice = nice_for(action.priority, self.step())
        args = [f"JobId={_jid(action)}", f"Nice={nice}"]
        qos = self.qos_funded if action.funded else self.qos_unfunded
        if qos and not action.figures.get("running"):
            args.append(f"QOS={qos}")
        return self._run(action, [*self.scontrol, "update", *args], dry_run,
                         f"Nice={nice}" + (f" QOS={qos}" if "QOS=" in args[-1] else ""))

    def warn(self, action: Action, *, dry_run: bool) -> Outcome:
        text = f"gpuledger {action.stage or 'warning'}: {action.reason}"[:500].replace('"', "'")
        return self._run(action, [*self.scontrol, "update", f"JobId={_jid(action)}", f"AdminComment={text}"],
                         dry_run, "AdminComment set")

    def hold(self, action: Action, *, dry_run: bool) -> Outcome:
        """``scontrol hold``: the pending job stays pending (Reason JobHeldAdmin) until released."""
        return self._run(action, [*self.scontrol, "hold", _jid(action)], dry_run, "held")

    def release(self, action: Action, *, dry_run: bool) -> Outcome:
        return self._run(action, [*self.scontrol, "release", _jid(action)], dry_run, "released")

    def preempt(self, action: Action, *, dry_run: bool) -> Outcome:
        if action.mode == REQUEUE:
            return self._run(action, [*self.scontrol, "requeue", _jid(action)], dry_run, "requeued")
        return self._run(action, [*self.scancel, _jid(action)], dry_run, "cancelled")

    def _run(self, action: Action, command: list[str], dry_run: bool, what: str) -> Outcome:
        shown = " ".join(command)
        if dry_run:
            return Outcome(DRY_RUN, f"would run: {shown}")
        env = None if self.env is None else {**os.environ, **self.env}
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=self.timeout_s, env=env,
                                  check=False)
        except FileNotFoundError:
            raise BackendUnavailable(f"{command[0]}: not found; install the Slurm client tools or put them on "
                                     "PATH") from None
        except subprocess.TimeoutExpired:
            # whether it acted is unknown: recorded as an error (never counted done), and the run
            # stops — the next plan reads the job's state again
            raise BackendUnavailable(f"{shown}: no answer within {self.timeout_s:g} s; check slurmctld "
                                     "(scontrol ping) and munge on this host",
                                     outcome=Outcome(ERROR, f"{shown}: no answer within {self.timeout_s:g} s",
                                                     error="timeout")) from None
        message = (done.stderr or done.stdout).strip().splitlines()
        message = message[-1] if message else ""
        if done.returncode == 0:  # says the command it ran, as the dry run said it would
            return Outcome(DONE, f"job {action.job_id} {what}; ran: {shown}")
        if any(s in message for s in _GONE):
            return Outcome(SKIPPED, f"job {action.job_id} is no longer in the queue", error=message, cause="gone")
        if any(s in message for s in _DENIED):
            raise CredentialError(f"{shown}: Slurm says {message!r}; run as SlurmUser, root or an operator "
                                  "(sacctmgr modify user NAME set adminlevel=operator)")
        if any(s in message for s in _DOWN):
            raise BackendUnavailable(f"{shown}: {message}; check slurmctld and munge on this host")
        return Outcome(ERROR, f"{shown} failed (exit {done.returncode})", error=message)
