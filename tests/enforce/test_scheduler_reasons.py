"""The scheduler's own reason beside gpuledger's (issue 38): Slurm's pending Reason read from sacct /
squeue, a Kueue Workload's QuotaReserved condition read through the Kubernetes stand-in, both kept
as a change log (scheduler_reasons, migration 027) and shown by `gpuledger enforce explain` with
gpuledger's own rank and whether the two agree."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from gpuledger.enforce.scheduler_view import QueuePlace, SchedulerWord, compare, ordinal
from typer.testing import CliRunner

from gpuledger import warehouse
from gpuledger.ingest.jobs.slurm import parse_parsable, parse_squeue_reasons, with_live_reasons, write_batch
from tests.helpers.configs import TWO_PROJECTS

NOW = datetime(2026, 11, 20, 12, 0)
AT = "2026-11-20T12:00:00"
HEADER = "JobID|Cluster|Account|User|JobName|AllocTRES|ReqTRES|Submit|Start|End|State|QOS|Partition|Reason"


def cli(*args):
    from gpuledger.cli import app

    return CliRunner().invoke(app, list(args), catch_exceptions=False)


@pytest.fixture
def path(tmp_path):
    p = tmp_path / "w.duckdb"
    (tmp_path / "c.yaml").write_text(TWO_PROJECTS)
    assert cli("config", "load", "--config", str(tmp_path / "c.yaml"), "-w", str(p)).exit_code == 0
    return p


def sacct(*rows: str, now: datetime = NOW):
    return parse_parsable("\n".join([HEADER, *rows]), origin="export.txt", now=now)


def reasons(path) -> list[tuple]:
    with warehouse.open_reader(path) as con:
        return con.execute("SELECT job_id, observed_at, scheduler, reason, source FROM scheduler_reasons "
                           "ORDER BY observed_at, job_id").fetchall()


def test_pending_reasons_are_kept_as_changes_only(path):
    run = "1|k|free-proj|bob|run|gres/gpu:h100=8|gres/gpu=8|2026-11-20T11:00:00|2026-11-20T11:00:01|Unknown|RUNNING|normal|gpu|None"
    wait = "2|k|funded-proj|ann|wait||gres/gpu=8|2026-11-20T11:30:00|Unknown|Unknown|PENDING|normal|gpu|{}"
    with warehouse.open_writer(path) as con:
        write_batch(con, sacct(run, wait.format("Resources")))
        # the same reason read again ten minutes later: nothing new
        write_batch(con, sacct(run, wait.format("Resources"), now=NOW + timedelta(minutes=10)))
        # then it changes: one row, at the read that saw it
        write_batch(con, sacct(run, wait.format("QOSMaxGRESPerUser"), now=NOW + timedelta(minutes=20)))
    # the running job's "None" is never kept
    assert reasons(path) == [("2", NOW, "slurm", "Resources", "sacct"),
                             ("2", NOW + timedelta(minutes=20), "slurm", "QOSMaxGRESPerUser", "sacct")]


def test_squeue_gives_the_live_reason_sacct_lacks():
    # sacct 22.05 keeps Reason=None for a pending job until its next event (seen on the rig)
    batch = sacct("2|k|funded-proj|ann|wait||gres/gpu=8|2026-11-20T11:30:00|Unknown|Unknown|PENDING|normal|gpu|None",
                  "3|k|funded-proj|ann|arr||gres/gpu=2|2026-11-20T11:31:00|Unknown|Unknown|PENDING|normal|gpu|None")
    live = parse_squeue_reasons("2|PENDING|Priority\n3|PENDING|Dependency\n9|RUNNING|None\nbad line\n")
    assert live == {"2": "Priority", "3": "Dependency"}
    got = with_live_reasons(batch, live).jobs
    assert got.select("job_id", "_reason", "_reason_from").rows() == [("2", "Priority", "squeue"),
                                                                    ("3", "Dependency", "squeue")]


@pytest.mark.parametrize(("place", "reason", "agree", "words"), [
    (3, "Resources", False, "gpuledger ranks it 3rd of 7 waiting on its cluster (priority 2000100, plan of "
                            "2026-11-20 12:00Z); Slurm says `Resources` — they DISAGREE"),
    (1, "Resources", True, "they agree: it is next in line and waits for GPUs to free"),
    (2, "Priority", True, "they agree: jobs of higher priority are ahead of it"),
    (1, "Priority", False, "Slurm keeps other work above it although gpuledger ranks it first"),
    (1, "Dependency", False, "Slurm holds it for a reason gpuledger does not weigh"),
])
def test_compare_says_whether_the_scheduler_agrees(place, reason, agree, words):
    ours = QueuePlace(place, 7, 2_000_100, NOW)
    said = SchedulerWord(NOW, "slurm", "PENDING", reason, None)
    got, sentence = compare(ours, said)
    assert got is agree and words in sentence, sentence


def test_ordinals():
    assert [ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 101, 111)] == [
        "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "101st", "111th"]


def test_explain_shows_slurms_reason_beside_gpuledgers_rank(path):
    # a funded job holds the 8 GPUs; two funded jobs wait: 2 (submitted first) and 3
    rows = ["1|k|funded-proj|ann|hold|gres/gpu:h100=8|gres/gpu=8|2026-11-20T10:00:00|2026-11-20T10:00:00|Unknown|RUNNING|"
            "normal|gpu|None",
            "2|k|funded-proj|ann|a||gres/gpu:h100=8|2026-11-20T11:00:00|Unknown|Unknown|PENDING|normal|gpu|Priority",
            "3|k|funded-proj|ann|b||gres/gpu:h100=8|2026-11-20T11:10:00|Unknown|Unknown|PENDING|normal|gpu|Resources"]
    with warehouse.open_writer(path) as con:
        write_batch(con, sacct(*rows))
    assert cli("enforce", "plan", "--now", AT, "-w", str(path)).exit_code == 0
    # same priority: gpuledger ranks 2 (the earlier submission) 1st and 3 2nd; Slurm says the reverse
    two = cli("enforce", "explain", "2", "-w", str(path)).output
    assert ("job k/2 in the queue: gpuledger ranks it 1st of 2 waiting on its cluster" in two
            and "Slurm says `Priority` — they DISAGREE" in two), two
    three = cli("enforce", "explain", "3", "-w", str(path)).output
    assert "gpuledger ranks it 2nd of 2" in three and "Slurm says `Resources` — they DISAGREE" in three, three
    # the scheduler's word alone, for a job enforcement never planned
    with warehouse.open_writer(path) as con:
        write_batch(con, sacct("4|k|free-proj|bob|c||gres/gpu=1|2026-11-20T11:20:00|Unknown|Unknown|PENDING|normal|"
                               "gpu|JobHeldUser"))
    four = cli("enforce", "explain", "4", "-w", str(path)).output
    assert "Slurm says `JobHeldUser`; gpuledger has not ranked it" in four, four


# --- Kueue, through the Kubernetes stand-in ------------------------------------------------------

def workload(name: str, *, status: str, reason: str, message: str, checks=()) -> dict:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
        "metadata": {"name": name, "namespace": "ml", "creationTimestamp": "2026-11-20T11:00:00Z",
                     "labels": {"gpuledger.io/project": "funded-proj"}},
        "spec": {"queueName": "team", "priority": 100, "podSets": [{
            "name": "main", "count": 1, "template": {"spec": {"containers": [
                {"name": "w", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "4"}}}]}}}]},
        "status": {"conditions": [{"type": "QuotaReserved", "status": status, "reason": reason, "message": message,
                                   "lastTransitionTime": "2026-11-20T11:05:00Z"}],
                   "admissionChecks": [{"name": n, "state": s} for n, s in checks]},
    }


def test_a_kueue_workloads_quota_reserved_reason_shows_in_explain(path, tmp_path):
    from gpuledger.ingest.jobs.kubernetes import KubernetesIngest, api_client
    from tests.helpers.k8s_standin import KubeStandIn

    server = KubeStandIn().start()
    try:
        server.workloads = [
            workload("wait", status="False", reason="WaitingForQuota",
                     message="insufficient unused quota for nvidia.com/gpu in flavor h100, 4 more needed",
                     checks=[("provision", "Pending")]),
            workload("never", status="False", reason="ExceedsMaxQuota",
                     message="nvidia.com/gpu 4 exceeds the flavor's nominal quota 2"),
            workload("in", status="True", reason="QuotaReserved", message="Quota reserved in ClusterQueue team"),
        ]
        # the admitted Workload's pod, created at its admission by its Job `in`: not a wait of its own
        server.add_pod({"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": "in-0", "namespace": "ml", "uid": "uid-in-0", "creationTimestamp": "2026-11-20T11:05:00Z",
            "labels": {"gpuledger.io/project": "funded-proj"},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "in", "uid": "j", "controller": True}]},
            "spec": {"containers": [{"name": "w", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "4"}}}]},
            "status": {"phase": "Running", "startTime": "2026-11-20T11:05:02Z"}})
        ingest = KubernetesIngest(api_client(server.write_kubeconfig(tmp_path / "kc")), cluster="k",
                                  warehouse_path=path, clock=lambda: NOW)
        ingest.sync()
        ingest.sync()  # unchanged: nothing new
    finally:
        server.close()
    at = datetime(2026, 11, 20, 11, 5)
    assert reasons(path) == [("ml/workload/in", at, "kueue", "QuotaReserved", "kubernetes"),
                             ("ml/workload/never", at, "kueue", "ExceedsMaxQuota", "kubernetes"),
                             ("ml/workload/wait", at, "kueue", "WaitingForQuota", "kubernetes")]
    assert cli("enforce", "plan", "--now", AT, "-w", str(path)).exit_code == 0
    told = cli("enforce", "explain", "ml/workload/wait", "-w", str(path)).output
    assert ("Kueue says `WaitingForQuota` (insufficient unused quota for nvidia.com/gpu in flavor h100, 4 more needed; "
            "admission checks: provision=Pending) — they agree") in told, told
    assert "gpuledger ranks it" in told
    never = cli("enforce", "explain", "ml/workload/never", "-w", str(path)).output
    assert "Kueue says `ExceedsMaxQuota`" in never and "they DISAGREE" in never, never
    # the admitted Workload's wait ended at its admission: 11:00 -> 11:05, 300 s
    waits = cli("report", "waits", "--by", "job", "--since", "2026-11-20T00:00:00", "--now", AT, "--format", "json",
                "-w", str(path)).output
    import json

    rows = {r["job_id"]: r for r in json.loads(waits)}
    with warehouse.open_reader(path) as con:  # the pod is a job of its own (its GPU-hours), named by its Job
        assert con.execute("SELECT name, namespace FROM jobs WHERE job_id = 'uid-in-0'").fetchall() == [("in", "ml")]
    assert set(rows) == {"ml/workload/in", "ml/workload/never", "ml/workload/wait"}  # not the pod uid-in-0
    assert rows["ml/workload/in"]["wait_s"] == 300.0 and rows["ml/workload/in"]["still_waiting"] is False
    assert rows["ml/workload/never"]["still_waiting"] is True and rows["ml/workload/never"]["cause"] == "scheduler"


@pytest.mark.parametrize(("args", "words"), [
    (["--period", "2026-13"], "--period"),
    (["--period", "2026-11", "--since", "2026-11-01T00:00:00"], "give --period or --since, not both"),
    (["--by", "team"], "'team': choose project, user, class, job"),
    (["--every", "hour"], "'hour': choose day, week"),
    (["--since", "yesterday-ish"], "--since"),
])
def test_report_waits_mistakes_end_in_one_line_and_exit_2(path, args, words):
    done = cli("report", "waits", *args, "-w", str(path))
    assert done.exit_code == 2 and words in done.output and "Traceback" not in done.output, done.output


def test_report_waits_by_user_per_week_as_csv(path):
    # ann: 11:00 -> 11:10 (600 s) and 11:20 -> 11:50 (1,800 s): p50 1,200, p90 600 + 0.9 × 1,200 =
    # 1,680, max 1,800; bob: submitted 11:00, pending at --now 12:00: 3,600 s so far, still waiting.
    # 2026-11-20 is a Friday: its week starts Monday 2026-11-16. Causes: ann's 2nd job (submitted
    # after bob's) started first -> bob's is fair-share; at most 2 GPUs were seen held at once and
    # ann's jobs found 2 and then 1 free -> the scheduler's own delay.
    rows = ["1|k|funded-proj|ann|a|gres/gpu:h100=1|gres/gpu=1|2026-11-20T11:00:00|2026-11-20T11:10:00|Unknown|RUNNING|"
            "normal|gpu|None",
            "2|k|funded-proj|ann|b|gres/gpu:h100=1|gres/gpu=1|2026-11-20T11:20:00|2026-11-20T11:50:00|Unknown|RUNNING|"
            "normal|gpu|None",
            "3|k|free-proj|bob|c||gres/gpu=1|2026-11-20T11:00:00|Unknown|Unknown|PENDING|normal|gpu|Priority"]
    with warehouse.open_writer(path) as con:
        write_batch(con, sacct(*rows))
    done = cli("report", "waits", "--by", "user", "--every", "week", "--since", "2026-11-20T00:00:00", "--now", AT,
               "--format", "csv", "--columns", "bucket,project,user_name,jobs,still_waiting,wait_p50_s,wait_p90_s,"
               "wait_max_s,main_cause", "-w", str(path))
    assert done.exit_code == 0, done.output
    assert done.output.splitlines() == [
        "bucket,project,user_name,jobs,still_waiting,wait_p50_s,wait_p90_s,wait_max_s,main_cause",
        "2026-11-16T00:00:00.000000,free-proj,bob,1,1,3600.000000,3600.000000,3600.000000,fair-share",
        "2026-11-16T00:00:00.000000,funded-proj,ann,2,0,1200.000000,1680.000000,1800.000000,scheduler"]
    # the table's legend names only the columns shown: "1st GPU" is a --wide column
    table = cli("report", "waits", "--by", "user", "--since", "2026-11-20T00:00:00", "--now", AT, "-w", str(path))
    wide = cli("report", "waits", "--by", "user", "--since", "2026-11-20T00:00:00", "--now", AT, "--wide",
               "-w", str(path))
    assert table.exit_code == 0 and wide.exit_code == 0, table.output + wide.output
    said, said_wide = " ".join(table.output.split()), " ".join(wide.output.split())
    assert "s = seconds, submit → start" in said and "1st GPU" not in said, said
    assert "1st GPU = a job's first submission → its first start" in said_wide, said_wide
