"""The plan file: the actions as JSON (for another tool) and as a readable table (for review).

Also a backend: ``apply --backend plan-file --out FILE`` writes the actions it would act on, so a
site's own tool can do the acting.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import polars as pl
from gpuledger.enforce.backends.base import DONE, DRY_RUN, Backend, Outcome
from gpuledger.enforce.model import Action

from gpuledger.errors import UsageError
from gpuledger.heap import collector_paused
from gpuledger.rules.clock import iso_z

#: The fields every action carries in the JSON (issue 10 §3), then the rest.
FIELDS = ("action", "cluster", "job_id", "project", "reason", "priority", "funded", "min_runtime_until",
          "warned_at", "dry_run")


def plan_document(actions: list[Action], *, plan_id: str | None, planned_at: datetime) -> dict:
    rows = []
    for a in actions:
        data = a.to_json()
        rows.append({**{k: data[k] for k in FIELDS}, **{k: v for k, v in data.items() if k not in FIELDS}})
    return {"plan_id": plan_id, "planned_at": iso_z(planned_at), "actions": rows}


@collector_paused()
def to_json(actions: list[Action], *, plan_id: str | None, planned_at: datetime) -> str:
    """The plan document with one action per line (grep finds a job's; ``json.dumps`` with an indent
    takes the pure-Python encoder: 5 s for the 33,000 actions of a cycle at Kueue's large shape)."""
    doc = plan_document(actions, plan_id=plan_id, planned_at=planned_at)
    encode = json.JSONEncoder(default=str).encode  # json.dumps(row, default=str), built once
    rows = ",\n".join(encode(row) for row in doc["actions"])
    head = json.dumps({"plan_id": doc["plan_id"], "planned_at": doc["planned_at"]})[:-1]
    return f'{head}, "actions": [\n{rows}\n]}}\n' if rows else f'{head}, "actions": []}}\n'


def read(path: Path) -> tuple[str | None, datetime | None, list[Action]]:
    """(plan_id, planned_at, actions) of a plan file; errors name the file and the fix."""
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise UsageError(f"--plan {path}: no such file (write one with `gpuledger enforce plan --format json "
                         "--out FILE`)") from None
    except ValueError as exc:
        raise UsageError(f"--plan {path}: not JSON ({exc}); pass a file written by `gpuledger enforce plan "
                         "--format json`") from None
    except (OSError, RecursionError) as exc:  # /proc/self/mem, a folder, a FIFO's EIO; JSON nested too deep
        raise UsageError(f"--plan {path}: cannot be read as a plan file ({getattr(exc, 'strerror', None) or exc}); "
                         "pass a file written by `gpuledger enforce plan --format json`") from None
    items = doc.get("actions") if isinstance(doc, dict) else doc
    if not isinstance(items, list):
        raise UsageError(f"--plan {path}: expected {{\"actions\": [...]}} as `gpuledger enforce plan` writes")
    actions = []
    for i, item in enumerate(items):
        try:
            actions.append(Action.from_json(item))
        except (TypeError, ValueError) as exc:
            raise UsageError(f"--plan {path}: actions[{i}]: {exc}") from None
    planned = doc.get("planned_at") if isinstance(doc, dict) else None
    at = datetime.strptime(planned.rstrip("Z"), "%Y-%m-%dT%H:%M:%S") if planned else None
    return (doc.get("plan_id") if isinstance(doc, dict) else None), at, actions


def frame(actions: list[Action]):
    """The plan as a polars frame for the terminal table."""
    return pl.DataFrame(
        [{"action": a.action, "cluster": a.cluster, "job_id": a.job_id, "project": a.project,
          "priority": a.priority, "mode": a.mode, "funded": a.funded, "min_runtime_until": a.min_runtime_until,
          "warned_at": a.warned_at, "rule": a.rule, "reason": a.reason, "dry_run": a.dry_run} for a in actions],
        schema={"action": pl.String, "cluster": pl.String, "job_id": pl.String, "project": pl.String,
                "priority": pl.Int64, "mode": pl.String, "funded": pl.Boolean,
                "min_runtime_until": pl.Datetime("us"), "warned_at": pl.Datetime("us"), "rule": pl.String,
                "reason": pl.String, "dry_run": pl.Boolean})


class PlanFileBackend(Backend):
    name = "plan-file"
    observes = False  # it sees no scheduler: plans for it preempt nothing

    def __init__(self, *, out: Path | None = None) -> None:
        self.out = out
        self.written: list[Action] = []

    def _keep(self, action: Action, dry_run: bool) -> Outcome:
        if dry_run:
            return Outcome(DRY_RUN, f"would write to {self.out}")
        self.written.append(action)
        return Outcome(DONE, f"written to {self.out}")

    def set_priority(self, action, *, dry_run):
        return self._keep(action, dry_run)

    def warn(self, action, *, dry_run):
        return self._keep(action, dry_run)

    def preempt(self, action, *, dry_run):
        return self._keep(action, dry_run)

    def hold(self, action, *, dry_run):
        return self._keep(action, dry_run)

    def release(self, action, *, dry_run):
        return self._keep(action, dry_run)

    def finish(self, planned_at: datetime) -> None:
        if self.out is not None and self.written:
            self.out.write_text(to_json(self.written, plan_id=None, planned_at=planned_at))
