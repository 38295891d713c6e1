"""`gpuledger enforce replay`'s memory: each replayed cycle decides as if every earlier cycle's plan
had been carried out. Pure.

Recorded data does not react to a plan: a job the plan preempted runs on in it, squatting as before.
Deciding on it again would preempt it again, and those phantom preemptions would take the caps
(per cycle, per project, per rolling hour) from the squatters still running, which then wait for
cycles the live enforcer would not have made them wait (seen in the demo: 1g squatters preempted
6 h late). So a stopped job leaves the replay's situation, its preemption counts against the rolling
caps as a performed one does, and each warning counts as delivered when planned.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import datetime

from gpuledger.enforce.model import Action, Situation, Warning


@dataclass
class ReplayMemory:
    warnings: dict[tuple[str, str], list[Warning]] = field(default_factory=dict)
    # job key -> (project, when the plan preempted it): the plan stopped (or requeued) it
    stopped: dict[tuple[str, str], tuple[str | None, datetime]] = field(default_factory=dict)

    def situation(self, gathered: Situation, *, observed_by: str) -> Situation:
        """``gathered`` (what the warehouse shows at the cycle's time) as the replay decides on it:
        the warnings planned so far, no history of applied actions, the jobs the plan stopped gone,
        their preemptions performed; the warehouse stands for the scheduler's view."""
        gone = self.stopped
        return dataclasses.replace(
            gathered, warnings=self.warnings, history={}, observed_by=observed_by,
            jobs=[dataclasses.replace(j, observed={}) for j in gathered.jobs if j.key not in gone],
            findings=[f for f in gathered.findings if (f.cluster, f.job_id) not in gone],
            recent_preemptions=[*gathered.recent_preemptions,
                                *((c, j, project, at) for (c, j), (project, at) in gone.items())])

    def carried_out(self, actions: list[Action], at: datetime) -> None:
        """Remember what the cycle at ``at`` planned: its warnings (delivered as planned) and its
        preemptions."""
        for a in actions:
            if a.action == "warn" and a.idle_since is not None:
                self.warnings.setdefault((a.cluster, a.job_id), []).append(Warning(a.idle_since, a.stage, at, at))
            elif a.action == "preempt":
                self.stopped.setdefault((a.cluster, a.job_id), (a.project, at))
