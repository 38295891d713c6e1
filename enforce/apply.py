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
    REFUSED,
    SERVER_DRY_RUN,
    SKIPPED,
    Backend,
    BackendUnavailable,
    CredentialError,
    Outcome,
)
from gpuledger.enforce.model import ENDED as PHASE_ENDED
from gpuledger.enforce.model import (
    ENDED_STATES,
    HELD,
    HOLD,
    NONE,
    PREEMPT,
    RELEASE,
    RUNNING,
    SET_PRIORITY,
    WAITING,
    WARN,
    Action,
)


@dataclass
class ApplyRun:
    results: list[tuple[Action, Outcome]] = field(default_factory=list)
    already_done: list[Action] = field(default_factory=list)
    prepared: list[str] = field(default_factory=list)
    fatal: Exception | None = None

    @property
    def performed(self) -> int:
        return sum(1 for _, o in self.results if o.outcome in (DONE, SERVER_DRY_RUN))

    def audit_rows(self) -> list[tuple[Action, str, str | None, str | None]]:
        return [(a, o.outcome, o.error, o.detail, o.cause) for a, o in self.results]


def apply_actions(actions: list[Action], backend: Backend, *, dry_run: bool,
                  already_done: set[str] = frozenset(), guard=None) -> ApplyRun:
    """Act on every action that is not ``none`` and not already done, in plan order.

    A preemption goes ahead only while the scheduler still shows the job the plan judged: it is
    read again just before (``Backend.live``, in a dry run too — reads only — so the dry run says
    what the real run would do) and refused, with why, when it differs from what the plan
    observed, was planned without a live view, or ``guard(action)`` (the rolling caps, the data's
    freshness at apply time) names a reason."""
    run = ApplyRun()
    try:
        here = backend.cluster_name()
        run.prepared = backend.prepare(dry_run=dry_run)
    except (CredentialError, BackendUnavailable) as exc:
        run.fatal = exc
        return run
    verbs = {SET_PRIORITY: backend.set_priority, WARN: backend.warn, PREEMPT: backend.preempt,
             HOLD: backend.hold, RELEASE: backend.release}
    for action in actions:
        if action.action == NONE:
            continue
        if action.action_id in already_done:
            run.already_done.append(action)
            continue
        if here is not None and action.cluster != here:  # job ids repeat across clusters
            run.results.append((action, Outcome(REFUSED, elsewhere(action, backend, here), cause="other-cluster")))
            continue
        why_not = backend.handles(action)
        if why_not:
            run.results.append((action, Outcome(SKIPPED, why_not, cause="other-scheduler")))
            continue
        try:
            outcome = (_check(action, backend, guard) if action.action == PREEMPT
                       else _check_queued(action, backend) if action.action in (HOLD, RELEASE) or _team_order(action)
                       else None)
            if outcome is None:
                outcome = verbs[action.action](action, dry_run=dry_run)
        except (CredentialError, BackendUnavailable) as exc:
            if getattr(exc, "outcome", None) is not None:
                run.results.append((action, exc.outcome))
            run.fatal = exc
            break
        run.results.append((action, outcome))
    return run


def _check(action: Action, backend: Backend, guard) -> Outcome | None:
    """Why this preemption must not go ahead now (an outcome), or None."""
    if guard is not None:
        why = guard(action)
        if why:
            return Outcome(REFUSED, why, cause="rail")
    if not backend.observes:  # a plan file for another tool: that tool checks before acting
        return None
    if action.observed is None:
        return Outcome(REFUSED, "planned without the scheduler's live view (plan with --observe BACKEND): "
                                "nothing is preempted", cause="no-live-view")
    live = backend.live(action)
    if live is None:
        return Outcome(SKIPPED, f"{backend.name} no longer lists job {action.job_id} (ended or gone): "
                                "nothing to preempt", cause="gone")
    if live.get("phase") == PHASE_ENDED or str(live.get("state") or "").upper() in ENDED_STATES:
        return Outcome(SKIPPED, f"job {action.job_id} has already ended ({live['state']}): nothing to preempt",
                       cause="ended")
    if live.get("phase") not in (None, RUNNING):
        return Outcome(SKIPPED, f"job {action.job_id} holds no GPUs now ({live.get('state')}: the scheduler "
                                "already stopped or evicted it): nothing to preempt", cause="not-holding")
    changed = differences(action.observed, live)
    if changed:
        return Outcome(REFUSED, "the job is no longer what the plan judged (" + "; ".join(changed)
                       + "): not preempted; the next plan decides again", cause="changed")
    return _still_waiting(action, backend)


def _team_order(action: Action) -> bool:
    return action.action == SET_PRIORITY and action.rule == "team-order"


def _check_queued(action: Action, backend: Backend) -> Outcome | None:
    """A lead's hold or order acts only on a job the scheduler shows waiting now (a job that started
    since the plan is left as it runs: a hold never stops work, an order is for the queue), a
    release on one it still lists."""
    if not backend.observes:
        return None
    live = backend.live(action)
    if live is None:
        return Outcome(SKIPPED, f"{backend.name} no longer lists job {action.job_id} (ended or gone): nothing to "
                                f"{action.action}", cause="gone")
    phase = live.get("phase")
    if action.action == HOLD and phase not in (None, WAITING, HELD):  # held already: the backend says unchanged
        return Outcome(SKIPPED, f"job {action.job_id} no longer waits ({live.get('state')}): a hold never stops "
                                "a started job", cause="not-waiting")
    if _team_order(action) and phase not in (None, WAITING, HELD):
        return Outcome(SKIPPED, f"job {action.job_id} no longer waits ({live.get('state')}): its lead's order is for "
                                "queued jobs; the next plan gives it its running priority", cause="not-waiting")
    if action.action == RELEASE and phase not in (None, WAITING, HELD):
        return Outcome(SKIPPED, f"job {action.job_id} is {live.get('state')}: nothing to release", cause="not-held")
    return None


def _still_waiting(action: Action, backend: Backend) -> Outcome | None:
    """A preemption for waiting work goes ahead only while the job it serves still waits, as the
    scheduler shows it now: it may have started, ended or been replaced since the plan (its job
    record in the warehouse is up to an ingest period old)."""
    serves = action.serves
    if not serves:
        return None
    words = f"the {serves.get('words') or 'job'} {serves['job_id']} it would serve"
    if serves.get("observed") is None:
        return Outcome(REFUSED, f"{words} was not in the scheduler's live view when planned: not preempted",
                       cause="beneficiary-unobserved")
    beneficiary = Action(action=PREEMPT, cluster=action.cluster, job_id=serves["job_id"], project=None,
                         reason="", rule="", source=serves.get("source"), namespace=serves.get("namespace"),
                         name=serves.get("name"), scheduler_job=serves.get("scheduler_job"))
    live = backend.live(beneficiary)
    if live is None:
        return Outcome(REFUSED, f"{words} is no longer listed by {backend.name} (ended or gone): not preempted",
                       cause="beneficiary-gone")
    if live.get("phase") != WAITING:
        return Outcome(REFUSED, f"{words} no longer waits ({live.get('state')}): not preempted; the next plan "
                                "decides again", cause="beneficiary-not-waiting")
    changed = differences(serves["observed"], live)
    if changed:
        return Outcome(REFUSED, f"{words} is no longer what the plan judged (" + "; ".join(changed)
                       + "): not preempted; the next plan decides again", cause="beneficiary-changed")
    return None


def elsewhere(action: Action, backend: Backend, here: str) -> str:
    """Why an action decided for another cluster is refused, in words naming both clusters."""
    return (f"decided for cluster {action.cluster}, but this {backend.name} backend acts on cluster {here} "
            f"({backend.cluster_source}): job ids repeat across clusters, so nothing is done here; apply "
            f"{action.cluster}'s actions with a backend of that cluster")



def differences(planned: dict, live: dict) -> list[str]:
    """What changed between the plan's observation of a job and the scheduler's view now, in words."""
    out = []
    for key, was in sorted(planned.items()):
        if isinstance(was, dict):
            now_d = live.get(key) or {}
            out += [f"{key[:-1]} {k} was {v!r}, now {now_d.get(k)!r}" for k, v in sorted(was.items())
                    if now_d.get(k) != v]
        elif live.get(key) != was:
            out.append(f"{key} was {was!r}, now {live.get(key)!r}")
    return out
