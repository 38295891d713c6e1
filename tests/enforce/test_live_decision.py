"""The whole decision judged on the live picture, and a dry run that lists every write (issue 33),
on the Kubernetes stand-in the official client speaks real HTTP to:

* a Workload Kueue itself evicted between plan and apply (waiting again, holding no quota) is left
  alone — never deactivated — and why is kept in the audit;
* for Kueue and plain Kubernetes, the dry run's lines are exactly the writes the real run then
  sends, as the API server received them (method, path and body: patches with their annotations,
  Events, evictions with their uid precondition and grace).
"""

from __future__ import annotations

import json
from datetime import datetime

import pytest
from gpuledger.enforce.apply import apply_actions
from gpuledger.enforce.backends.k8s_common import describe
from gpuledger.enforce.model import Action

from tests.enforce.test_kubernetes import (  # noqa: F401  (fixtures used by name)
    WL,
    _audit,
    _cli,
    api,
    kubeconfig,
    kueue_warehouse,
    server,
    workload,
)
from tests.helpers.alert_receivers import receivers_fixture  # noqa: F401  (the receivers fixture)

kubernetes = pytest.importorskip("kubernetes")
AT = "2026-11-20T12:00:00"  # the cycle (tests.enforce.test_kubernetes.NOW)
CLOCK = datetime(2026, 11, 20, 12, 0, 7)  # the backends' clock, fixed: the warned-at stamp is the same in both runs


def writes(server) -> list[str]:
    """Every request that changed something, as the stand-in received it, in describe's words."""
    return [describe(c["method"], c["path"], json.loads(c["body"]) if isinstance(c["body"], str) else c["body"])
            for c in server.calls if c["method"] != "GET"]


def listed(run) -> list[str]:
    """The writes an apply run's outcomes name (dry run: would send; real: sent), in order."""
    return [line.strip() for _, o in run.results for line in o.detail.splitlines()[1:]]


def _planned_preemption(server, path, tmp_path):
    """Funded work waits for 8 H100 (holding no quota); the unfunded `burst` Workload holds them: the
    plan, made with Kueue's live view, preempts burst for it. Returns (kubeconfig, plan file)."""
    from gpuledger import warehouse

    kc = kubeconfig(server, tmp_path / "kc")
    with warehouse.open_writer(path) as con:
        con.execute("INSERT INTO jobs (cluster, job_id, project, name, namespace, kind, gpu_model, gpus, "
                    "min_runtime_s, submit_time, state, priority, source, updated_at) VALUES ('k', "
                    "'ml/workload/waiting', 'funded-proj', 'waiting', 'ml', 'training', 'H100', 8, 3600, ?, "
                    "'PENDING', 10, 'kueue', ?)", [datetime(2026, 11, 20, 11, 55), datetime(2026, 11, 20, 12)])
    for n in ("funded", "burst", "waiting"):
        server.kueue_workloads[("ml", n)] = workload(n, priority=10, admitted=n != "waiting")
    plan = tmp_path / "plan.json"
    done = _cli("enforce", "plan", "--observe", "kueue", "--kubeconfig", str(kc), "--format", "json", "--out",
                str(plan), "--now", AT, "-w", str(path))
    assert done.exit_code == 0, done.output
    (pre,) = [a for a in json.loads(plan.read_text())["actions"] if a["action"] == "preempt"]
    assert pre["job_id"] == "ml/workload/burst" and pre["observed"]["state"] == "QuotaReserved"
    assert pre["serves"]["job_id"] == "ml/workload/waiting" and pre["serves"]["observed"]["state"] == "Pending"
    return kc, plan


def test_a_preemption_whose_beneficiary_lost_its_funding_is_refused(server, kueue_warehouse, tmp_path):
    kc, plan = _planned_preemption(server, kueue_warehouse, tmp_path)
    # between plan and apply the budget goes (leadership moved it): funded-proj has none left
    config = tmp_path / "c.yaml"
    config.write_text(config.read_text().replace("  - {node: funded-proj, gpu_hours: 1000, period: 2026-11}\n",
                                                 "  - {node: funded-proj, gpu_hours: 0, period: 2026-11}\n"))
    assert _cli("config", "load", "--config", str(config), "-w", str(kueue_warehouse)).exit_code == 0
    out = _cli("enforce", "apply", "--backend", "kueue", "--plan", str(plan), "--yes", "--kubeconfig", str(kc),
               "--now", AT, "-w", str(kueue_warehouse)).output
    assert ("refused        preempt      k/ml/workload/burst: the funded job ml/workload/waiting it would serve is "
            "no longer funded at apply time (budget exhausted") in out, out
    assert server.kueue_workloads[("ml", "burst")]["spec"]["active"] is True


def test_a_workload_kueue_evicted_between_plan_and_apply_is_left_alone(server, kueue_warehouse, tmp_path):
    kc, plan = _planned_preemption(server, kueue_warehouse, tmp_path)
    # Kueue preempts it for its own reasons before gpuledger applies: evicted, waiting again, no quota
    burst = server.kueue_workloads[("ml", "burst")]
    burst["status"]["conditions"] = [{"type": "QuotaReserved", "status": "False"},
                                     {"type": "Evicted", "status": "True", "reason": "Preempted"}]
    out = _cli("enforce", "apply", "--backend", "kueue", "--plan", str(plan), "--yes", "--kubeconfig", str(kc),
               "--now", AT, "-w", str(kueue_warehouse)).output
    assert "skipped        preempt      k/ml/workload/burst: job ml/workload/burst holds no GPUs now (Evicted" in out, out
    assert burst["spec"]["active"] is True  # never deactivated (mode stop would have left it off for good)
    assert not [c for c in server.calls if c["method"] == "PATCH" and c["path"] == f"{WL}/burst"
                and "active" in json.dumps(c["body"])]
    (row,) = _audit(kueue_warehouse, "SELECT outcome, cause, detail FROM enforcement_audit WHERE phase = 'applied' "
                                     "AND action = 'preempt'")
    assert row[:2] == ("skipped", "not-holding") and "holds no GPUs now (Evicted" in row[2]
    told = _cli("enforce", "explain", "ml/workload/burst", "-w", str(kueue_warehouse)).output
    assert "via kueue: skipped: job ml/workload/burst holds no GPUs now (Evicted" in told, told


def test_kueue_dry_run_lists_exactly_the_writes_the_real_run_sends(server, api):
    for n, admitted in (("burst", True), ("waiting", False)):
        server.kueue_workloads[("ml", n)] = workload(n, priority=100, admitted=admitted)
    common = dict(cluster="k", project="free-proj", rule="t", source="kueue", namespace="ml", name="burst")
    serves = {"job_id": "ml/workload/waiting", "source": "kueue", "namespace": "ml", "name": "waiting",
              "words": "funded job", "observed": {"uid": "uid-waiting", "phase": "waiting"}}
    actions = [Action(action="set-priority", job_id="ml/workload/burst", reason="priority 102000: unfunded",
                      priority=102000, action_id="p:0", **common),
               Action(action="warn", job_id="ml/workload/burst", reason="idle 70 min", stage="warning",
                      action_id="p:1", **common),
               Action(action="preempt", job_id="ml/workload/burst", reason="unfunded, holds 8 GPUs a funded job waits for",
                      mode="requeue", observed={"uid": "uid-burst", "phase": "running"}, serves=serves,
                      action_id="p:2", **common)]
    from gpuledger.enforce.backends.kueue import KueueBackend

    dry = apply_actions(actions, KueueBackend(api=api, cluster="k", clock=lambda: CLOCK), dry_run=True)
    assert [o.outcome for _, o in dry.results] == ["dry-run"] * 3 and writes(server) == []
    real = apply_actions(actions, KueueBackend(api=api, cluster="k", clock=lambda: CLOCK), dry_run=False)
    assert [o.outcome for _, o in real.results] == ["done"] * 3
    # 3 patches and 3 Events, byte for byte what the dry run said, in its order
    assert listed(dry) == writes(server) == listed(real) and len(writes(server)) == 6
    assert writes(server)[4].startswith(f'PATCH {WL}/burst {{"metadata": {{"annotations": '
                                        '{"gpuledger.io/preempted": "unfunded, holds 8 GPUs a funded job waits for", '
                                        '"gpuledger.io/requeue": "pending"}}, "spec": {"active": false}}')
    assert '"gpuledger.io/warned-at": "2026-11-20T12:00:07Z"' in writes(server)[2]


def test_eviction_dry_run_lists_exactly_the_writes_the_real_run_sends(server, api):
    from gpuledger.enforce.backends.kubernetes import EvictionBackend

    for name, phase in (("burst", "Running"), ("want", "Pending")):
        server.add_pod({"apiVersion": "v1", "kind": "Pod",
                        "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}", "labels": {}},
                        "spec": {"containers": [{"name": "main"}]}, "status": {"phase": phase}})
    common = dict(cluster="k", job_id="uid-burst", project="free-proj", rule="t", source="kubernetes",
                  scheduler_job="ml/burst", observed={"uid": "uid-burst", "phase": "running"})
    serves = {"job_id": "uid-want", "scheduler_job": "ml/want", "source": "kubernetes",
              "observed": {"uid": "uid-want", "phase": "waiting"}}
    actions = [Action(action="warn", reason="idle 70 min", stage="warning", action_id="p:0", **common),
               Action(action="preempt", reason="unfunded, holds 8 GPUs", mode="stop", serves=serves,
                      action_id="p:1", **common)]
    backend = dict(api=api, cluster="k", grace_period_s=30, clock=lambda: CLOCK)
    dry = apply_actions(actions, EvictionBackend(**backend), dry_run=True)
    assert [o.outcome for _, o in dry.results] == ["dry-run"] * 2 and writes(server) == []
    real = apply_actions(actions, EvictionBackend(**backend), dry_run=False)
    assert [o.outcome for _, o in real.results] == ["done"] * 2
    assert listed(dry) == writes(server) == listed(real)
    assert writes(server)[1] == "POST /api/v1/namespaces/ml/pods/burst/eviction precondition uid uid-burst, grace 30 s"
    assert [w.split(" ", 4)[2:4] for w in writes(server)[::2]] == [["Warning", "GpuledgerIdleWarning"],
                                                                   ["Warning", "GpuledgerPreempted"]]


@pytest.mark.slow
def test_the_owner_of_a_preempted_job_hears_why_once_by_real_email(server, tmp_path, receivers):
    """An unfunded pod of bob's is evicted for funded work (the real apply through the stand-in);
    the alert cycle mails bob once, through a real SMTP server: which job by name, why, the GPU-hours
    it held, what happens to it, what to do and whom to ask. A second cycle sends nothing more."""
    from gpuledger import warehouse
    from gpuledger.alerts.cycle import run_alert_cycle
    from gpuledger.config import parse_config_text
    from tests.helpers.alert_receivers import wait_for
    from tests.helpers.configs import TWO_PROJECTS

    _, mails = receivers
    kc = kubeconfig(server, tmp_path / "kc")  # context k: the cluster the jobs are on
    config = tmp_path / "c.yaml"
    config.write_text(TWO_PROJECTS + "  alerts:\n    owner_channel: owner-mail\n"
                      "    owners: {bob: bob@example.org}\n    contact: gpu-help@example.org\n")
    path = tmp_path / "w.duckdb"
    assert _cli("config", "load", "--config", str(config), "-w", str(path)).exit_code == 0
    start = datetime(2026, 11, 20, 9, 30)  # bob's pod has held 8 GPUs for 2.5 h at the cycle (12:00)
    with warehouse.open_writer(path) as con:
        for uid, name, project, user, began in (("uid-burst", "finetune-llama", "free-proj", "bob", start),
                                                ("uid-want", "want", "funded-proj", "ann", None)):
            con.execute("INSERT INTO jobs (cluster, job_id, scheduler_job, project, name, namespace, kind, gpu_model, "
                        "gpus, min_runtime_s, submit_time, start_time, state, source, user_name, updated_at) VALUES "
                        "('k', ?, ?, ?, ?, 'ml', 'training', 'H100', 8, 3600, ?, ?, ?, 'kubernetes', ?, ?)",
                        [uid, f"ml/{name}", project, name, start, began, "RUNNING" if began else "PENDING", user,
                         datetime(2026, 11, 20, 11, 59)])
    for name, uid, phase in (("finetune-llama", "uid-burst", "Running"), ("want", "uid-want", "Pending")):
        server.add_pod({"apiVersion": "v1", "kind": "Pod",
                        "metadata": {"name": name, "namespace": "ml", "uid": uid, "labels": {}},
                        "spec": {"containers": [{"name": "main"}]}, "status": {"phase": phase}})
    out = _cli("enforce", "apply", "--backend", "kubernetes", "--yes", "--kubeconfig", str(kc), "--now", AT,
               "-w", str(path)).output
    assert "done           preempt      k/uid-burst: evicted pod ml/finetune-llama" in out, out
    policy = parse_config_text(config.read_text()).policy
    for _ in range(2):  # the second cycle finds the same preemption: nothing new
        run_alert_cycle(path, policy, now=datetime(2026, 11, 20, 12, 5))
    wait_for(lambda: len(mails) >= 1, "the owner's e-mail")
    (mail,) = mails
    assert mail["To"] == "bob@example.org"
    assert " ".join(mail["Subject"].split()) == "Your job finetune-llama on k was stopped for waiting funded work"
    body = (mail.get_payload(decode=True).decode() if not mail.is_multipart() else
            mail.get_payload()[0].get_payload(decode=True).decode()).replace("\r\n", "\n")
    # 8 GPUs × (12:00 − 09:30 = 2.5 h) = 20 GPU-hours
    for words in ("Hello bob,", "your job finetune-llama (id uid-burst) of project free-proj, on cluster k",
                  "Why: unfunded (no budget), running on burst; holds 8 H100 GPU(s) that funded job uid-want",
                  "It held 8 GPUs for 2.50 h: 20.00 GPU-hours.",
                  "It was stopped (it declares no checkpointing): resubmit it when you need it.",
                  "To see what happened to it:\n    kubectl -n ml get events --field-selector "
                  "involvedObject.name=finetune-llama",
                  "Ask gpu-help@example.org for an exemption, naming job uid-burst on k."):
        assert words in body, body
