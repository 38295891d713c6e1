"""`enforce replay`'s summary counts each preempted job once, by what it was when the plan first
preempted it: a job preempted for waiting funded work that the recorded history shows squatting
only later is "other", not a squatter (the recorded job runs on after the plan stopped it)."""

from __future__ import annotations

from datetime import datetime
from types import SimpleNamespace

from gpuledger.cli.enforce import _ReplayTally

T0, T1 = datetime(2026, 11, 2, 10), datetime(2026, 11, 2, 14)


def _situation(findings=()):
    jobs = [SimpleNamespace(key=("sim", k), name=k, running=False) for k in ("early", "squat")]
    return SimpleNamespace(jobs=jobs, findings=[SimpleNamespace(cluster="sim", job_id=k, finding="squatting")
                                                for k in findings])


def _preempt(job_id: str, rule: str):
    return SimpleNamespace(cluster="sim", job_id=job_id, action="preempt", rule=rule, mode="stop", stage=None,
                           project="p", kind="batch", reason=f"{rule}: ...")


def test_a_job_preempted_before_it_squatted_counts_as_other_work(capsys):
    tally = _ReplayTally(show_all=False)
    # 10:00: `early` preempted for waiting funded work, squatting nowhere yet; `squat` already squats
    # and is preempted as a squatter
    tally.record(T0, _situation(findings=["squat"]), [_preempt("early", "unfunded-burst"),
                                                     _preempt("squat", "squatter")], rails=None)
    # 14:00: the recorded `early` ran on and squats now; the replay plans its preemption again
    tally.record(T1, _situation(findings=["squat", "early"]), [_preempt("early", "squatter")], rails=None)
    summary = tally.summary(T0, "1h")
    assert "1 squatter(s) preempted, 1 other job(s) preempted for waiting funded work" in summary
    # printed: the squatter's preemption once; `early`'s first preemption was not a squatter's
    # (hidden without --all), and nothing about it after the plan stopped it
    printed = capsys.readouterr().out.splitlines()
    assert [ln.split()[4].split("/")[1] for ln in printed] == ["squat"]
