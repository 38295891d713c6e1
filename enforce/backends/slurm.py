"""Slurm: ``scontrol update JobId=… Nice=…`` (and QOS on pending jobs where configured),
``scontrol update JobId=… AdminComment=…`` to warn, ``scontrol requeue`` or ``scancel`` to preempt.

gpuledger's priority maps to Nice = (1,000,000 − priority) // 100, so production inference gets
Nice 0, funded work about 4,900 and unfunded about 8,900: the order of gpuledger's priorities is
kept, and Slurm's own multifactor priority (fair share, age) still orders jobs inside a band as
far as the site's PriorityWeight* allow. Slurm refuses a QOS change on a running job, so QOS is set
only on pending ones.
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
from gpuledger.enforce.model import REQUEUE, Action
from gpuledger.enforce.policy import EXEMPT_BASE

_JOB_ID = re.compile(r"^\d+(?:[_+]\d+)?$")
_GONE = ("Invalid job id", "Job has already finished", "already completing or completed")
_DENIED = ("Access/permission denied", "Permission denied", "Invalid user", "Authentication failure")
_DOWN = ("Unable to contact slurm controller", "Socket timed out", "Connection refused", "munge")
TIMEOUT_S = 60


def _jid(action: Action) -> str:
    """The Slurm JobID (``scheduler_job``; the row's job_id names one run of a requeued job)."""
    return action.scheduler_job or action.job_id


def nice_for(priority: int) -> int:
    """Slurm Nice for a gpuledger priority (higher priority, lower nice; never negative)."""
    return max(0, (EXEMPT_BASE - int(priority)) // 100)


class SlurmBackend(Backend):
    name = "slurm"

    def __init__(self, *, scontrol: str = "scontrol", scancel: str = "scancel", env: dict | None = None,
                 qos_funded: str | None = None, qos_unfunded: str | None = None) -> None:
        self.scontrol, self.scancel = scontrol, scancel
        self.env = env
        self.qos_funded, self.qos_unfunded = qos_funded, qos_unfunded

    def handles(self, action: Action) -> str | None:
        if (action.source and not action.source.startswith("slurm")) or not _JOB_ID.match(_jid(action)):
            return f"not a Slurm job (source {action.source or 'unknown'}, id {_jid(action)})"
        return None

    def observe(self) -> dict[str, dict]:
        """Every job ``scontrol show job -o`` lists, with its Requeue flag (Requeue=1: it may be
        requeued, so a preemption requeues it)."""
        env = None if self.env is None else {**os.environ, **self.env}
        try:
            done = subprocess.run([self.scontrol, "show", "job", "-o"], capture_output=True, text=True,
                                  timeout=TIMEOUT_S, env=env, check=False)
        except FileNotFoundError:
            raise BackendUnavailable(f"{self.scontrol}: not found; install the Slurm client tools") from None
        if done.returncode != 0:
            raise BackendUnavailable(f"scontrol show job: {done.stderr.strip() or done.returncode}")
        out = {}
        for line in done.stdout.splitlines():
            fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
            job_id = fields.get("JobId")
            if job_id:
                if fields.get("ArrayTaskId") and fields.get("ArrayJobId"):
                    job_id = f"{fields['ArrayJobId']}_{fields['ArrayTaskId']}"
                out[job_id] = {"requeue_flag": fields.get("Requeue") == "1"}
        return out

    def set_priority(self, action: Action, *, dry_run: bool) -> Outcome:
        args = [f"JobId={_jid(action)}", f"Nice={nice_for(action.priority)}"]
        qos = self.qos_funded if action.funded else self.qos_unfunded
        if qos and not action.figures.get("running"):
            args.append(f"QOS={qos}")
        return self._run(action, [self.scontrol, "update", *args], dry_run,
                         f"Nice={nice_for(action.priority)}" + (f" QOS={qos}" if "QOS=" in args[-1] else ""))

    def warn(self, action: Action, *, dry_run: bool) -> Outcome:
        text = f"gpuledger {action.stage or 'warning'}: {action.reason}"[:500].replace('"', "'")
        return self._run(action, [self.scontrol, "update", f"JobId={_jid(action)}", f"AdminComment={text}"],
                         dry_run, "AdminComment set")

    def preempt(self, action: Action, *, dry_run: bool) -> Outcome:
        if action.mode == REQUEUE:
            return self._run(action, [self.scontrol, "requeue", _jid(action)], dry_run, "requeued")
        return self._run(action, [self.scancel, _jid(action)], dry_run, "cancelled")

    def _run(self, action: Action, command: list[str], dry_run: bool, what: str) -> Outcome:
        shown = " ".join(command)
        if dry_run:
            return Outcome(DRY_RUN, f"would run: {shown}")
        env = None if self.env is None else {**os.environ, **self.env}
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S, env=env, check=False)
        except FileNotFoundError:
            raise BackendUnavailable(f"{command[0]}: not found; install the Slurm client tools or put them on "
                                     "PATH") from None
        except subprocess.TimeoutExpired:
            return Outcome(ERROR, f"{shown}: no answer within {TIMEOUT_S} s", error="timeout")
        message = (done.stderr or done.stdout).strip().splitlines()
        message = message[-1] if message else ""
        if done.returncode == 0:
            return Outcome(DONE, f"job {action.job_id} {what}")
        if any(s in message for s in _GONE):
            return Outcome(SKIPPED, f"job {action.job_id} is no longer in the queue", error=message)
        if any(s in message for s in _DENIED):
            raise CredentialError(f"{shown}: Slurm says {message!r}; run as SlurmUser, root or an operator "
                                  "(sacctmgr modify user NAME set adminlevel=operator)")
        if any(s in message for s in _DOWN):
            raise BackendUnavailable(f"{shown}: {message}; check slurmctld and munge on this host")
        return Outcome(ERROR, f"{shown} failed (exit {done.returncode})", error=message)
