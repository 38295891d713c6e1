"""One enforcement cycle over the warehouse, for the CLI and the Dagster assets alike: gather the
situation and decide (a reader), record the plan (a writer), act on a recorded plan through a
backend and record the outcomes. Time is passed in."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import datetime

from gpuledger.enforce import audit, inputs, policy
from gpuledger.enforce.apply import ApplyRun, apply_actions
from gpuledger.enforce.model import Action, Situation

from gpuledger.config import Config

Opener = Callable[[], AbstractContextManager]


def decide_at(con, cfg: Config, now: datetime, observed: dict | None = None) -> tuple[list[Action], Situation]:
    situation = inputs.gather(con, cfg, now=now, observed=observed)
    return policy.decide(situation, cfg.policy.enforcement), situation


def plan(reader: Opener, writer: Opener, cfg: Config, now: datetime, *, record: bool = True,
         observed: dict | None = None) -> tuple[list[Action], str | None, Situation]:
    """(actions, plan_id or None when not recorded, situation). ``observed``: Backend.observe()."""
    with reader() as con:
        actions, situation = decide_at(con, cfg, now, observed)
    plan_id = None
    if record:
        with writer() as con:
            plan_id = audit.record_plan(con, actions, now=now)
    return actions, plan_id, situation


def apply_plan(reader: Opener, writer: Opener, actions: list[Action], backend, *, dry_run: bool,
               planned_at: datetime) -> ApplyRun:
    """Act on recorded actions (each at most once across runs) and record every outcome; a fatal
    error (credential, scheduler unreachable) is in ``run.fatal`` after what was done is recorded."""
    with reader() as con:
        done = audit.done_ids(con, [a.action_id for a in actions if a.action_id])
    run = apply_actions(actions, backend, dry_run=dry_run, already_done=done)
    with writer() as con:
        audit.record_applied(con, run.audit_rows(), backend=backend.name, dry_run=dry_run, now=planned_at)
    return run
