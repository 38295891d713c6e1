"""The one interface every backend implements, and the outcome of one action.

A backend acts on one action at a time; each method takes ``dry_run`` and, when it is true, says
what it would do and calls nothing (the plan-level dry run). Backends that have one also support
the API server's own dry run (``server_dry_run``): the request is sent with ``dryRun=All`` and the
server validates it without changing anything.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuledger.enforce.model import Action

from gpuledger.errors import RunError

DONE = "done"
DRY_RUN = "dry-run"
SERVER_DRY_RUN = "server-dry-run"
UNCHANGED = "unchanged"
REFUSED = "refused"  # e.g. a PodDisruptionBudget said no: retried next cycle, never forced
ERROR = "error"
SKIPPED = "skipped"  # this backend cannot act on this job (another scheduler's, or no such action)


@dataclass(frozen=True)
class Outcome:
    """What one action came to: the outcome word, why in words (``detail``), the scheduler's own
    message (``error``) and ``cause``, a short stable name for why (a metric label, a filter)."""

    outcome: str
    detail: str
    error: str | None = None
    cause: str | None = None


class CredentialError(RunError):
    """The scheduler refused who we are (expired token, no permission): nothing more is tried."""


class Backend:
    """Base class: ``handles`` says whether this backend can act on a job; the three verbs act.

    A job is (cluster, scheduler, job id): a backend talks to one cluster (``cluster_name``) and
    acts only on actions decided for that cluster — a job id alone names different jobs on two
    clusters."""

    name = "backend"
    server_dry_run = False

    def cluster_name(self) -> str | None:
        """The cluster this backend talks to (None: any — a plan file for another tool)."""
        return None

    #: how ``cluster_name`` was learned, for the refusal's words
    cluster_source = "configured"


    def prepare(self, *, dry_run: bool) -> list[str]:
        """Called once per apply run before the actions (e.g. re-queue what an earlier run
        deactivated). Returns lines describing what it did."""
        return []

    def handles(self, action: Action) -> str | None:
        """None when this backend can act on the action's job, else why not."""
        return None

    #: whether the backend can read the scheduler's live view (observe / live); a plan file cannot
    observes = True

    def observe(self) -> dict[str, dict]:
        """What the scheduler says about its jobs now, by gpuledger job id: identity fields
        (gpuledger.enforce.inputs.IDENTITY: ``uid``, ``state``, ``submit_time`` ...), ``labels``,
        ``annotations`` (a declared checkpoint), ``requeue_flag``, ``priority``. Reads only."""
        return {}

    def live(self, action: Action) -> dict | None:
        """The scheduler's view of the action's job now, in ``observe``'s shape; None when it lists
        no such job. Reads only (called in a dry run too)."""
        return None

    def set_priority(self, action: Action, *, dry_run: bool) -> Outcome:
        return Outcome(SKIPPED, f"{self.name} cannot change a job's priority")

    def warn(self, action: Action, *, dry_run: bool) -> Outcome:
        return Outcome(SKIPPED, f"{self.name} has no way to warn")

    def preempt(self, action: Action, *, dry_run: bool) -> Outcome:
        return Outcome(SKIPPED, f"{self.name} cannot preempt")

    def hold(self, action: Action, *, dry_run: bool) -> Outcome:
        """Keep a waiting job from starting (a team lead's hold) until ``release``."""
        return Outcome(SKIPPED, f"{self.name} cannot hold a job", cause="no-hold")

    def release(self, action: Action, *, dry_run: bool) -> Outcome:
        return Outcome(SKIPPED, f"{self.name} cannot release a held job", cause="no-hold")


class BackendUnavailable(RunError):
    """The scheduler cannot be reached at all: nothing more is tried this run. ``outcome``: what
    to record for the action under way when it happened (e.g. a command that timed out)."""

    def __init__(self, message: str, *, outcome: Outcome | None = None) -> None:
        super().__init__(message)
        self.outcome = outcome
