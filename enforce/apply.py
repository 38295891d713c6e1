"""Acting on a plan: each action through one backend, each result an audit row.

* Dry run (the default): the backend says what it would do and calls nothing.
* An action an earlier real apply finished is never performed again (same plan applied twice).
* An API error on one action is recorded and the others go on; a refused credential or an
  unreachable scheduler stops the run: what was done before is recorded whole, nothing else.
* ``apply_actions`` returns the run; ``performed`` is the count of actions done — the metric and
  the tests' oracle.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuledger.enforce.backends.base import (
    DONE,
    SERVER_DRY_RUN,
    SKIPPED,
    Backend,
    BackendUnavailable,
    CredentialError,
    Outcome,
)
from gpuledger.enforce.model import NONE, PREEMPT, SET_PRIORITY, WARN, Action


@dataclass
class ApplyRun:
    results: list[tuple[Action, Outcome]] = field(default_factory=list)
    already_done: list[Action] = field(default_factory=list)
    prepared: list[str] = field(default_factory=list)
    fatal: Exception | None = None

    @property
    def performed(self) -> int:
        return sum(1 for _, o in self.results if o.outcome in (DONE, SERVER_DRY_RUN))

    def audit_rows(self) -> list[tuple[Action, str, str | None]]:
        return [(a, o.outcome, o.error) for a, o in self.results]


def apply_actions(actions: list[Action], backend: Backend, *, dry_run: bool,
                  already_done: set[str] = frozenset()) -> ApplyRun:
    """Act on every action that is not ``none`` and not already done, in plan order."""
    run = ApplyRun()
    try:
        run.prepared = backend.prepare(dry_run=dry_run)
    except (CredentialError, BackendUnavailable) as exc:
        run.fatal = exc
        return run
    verbs = {SET_PRIORITY: backend.set_priority, WARN: backend.warn, PREEMPT: backend.preempt}
    for action in actions:
        if action.action == NONE:
            continue
        if action.action_id in already_done:
            run.already_done.append(action)
            continue
        why_not = backend.handles(action)
        if why_not:
            run.results.append((action, Outcome(SKIPPED, why_not)))
            continue
        try:
            outcome = verbs[action.action](action, dry_run=dry_run)
        except (CredentialError, BackendUnavailable) as exc:
            run.fatal = exc
            break
        run.results.append((action, outcome))
    return run
