"""What a simulated job asks for and how it behaves (the codes drive the signal shapes, signals.py)."""

from __future__ import annotations

from dataclasses import dataclass

IDLE, TRAINING, FINE_TUNE, BATCH, INFERENCE, INTERACTIVE, SQUAT, FAILING = range(8)
BEHAVIOUR_NAMES = ("idle", "training", "fine-tune", "batch", "inference", "interactive", "squat", "failing")

# Declared priorities. Users inflate them (Ai2: under plain priorities "everything is urgent"):
# most jobs say high, so a scheduler that orders by them is close to first come, first served.
PRIORITY_HIGH, PRIORITY_NORMAL, PRIORITY_LOW = 1000, 500, 100


def time_limit(duration_s: int) -> int:
    """The limit a user asks for work they expect to take ``duration_s``: a quarter more, rounded
    up to whole hours, at least one (Slurm's --time, a pod's activeDeadlineSeconds)."""
    return max(1, -(-int(duration_s * 1.25) // 3600)) * 3600


@dataclass
class JobSpec:
    project: str
    user: str
    name: str
    kind: str
    behaviour: int
    pool: str  # whole:<model> / mig:<profile> / shared (pools.py)
    count: int  # lanes wanted
    duration_s: int
    submit_s: int
    priority: int  # declared (inflated); the simulated scheduler orders by fair share, not by it
    min_runtime_s: int
    scheduler: str  # slurm / k8s
    chain: int = -1  # training chain id (its segments resume from checkpoints), -1 for none
    gpus: float = 1.0  # whole-GPU equivalents: count x the lane's fraction of a GPU
    debug: bool = False  # a short debug job: its project's own queue starts it first
    time_limit_s: int | None = None  # the limit it was submitted with (debug jobs: DEBUG_TIME_LIMIT_S)
    patience_s: int | None = None  # not started this long after submission: given up (a session)
    # a planted squatter (ground truth that must run): opened at the first instant its pool has room
    # from submit_s on, before the queue; its submission is recorded then (scheduler.py)
    opens_when_free: bool = False

    def __post_init__(self) -> None:
        if self.time_limit_s is None:  # asked at submission: a job that then fails keeps it
            self.time_limit_s = time_limit(self.duration_s)
