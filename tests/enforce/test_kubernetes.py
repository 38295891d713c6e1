"""The Kueue and eviction backends drive the official ``kubernetes`` client over real HTTP against
the stand-in API server (tests/helpers/k8s_standin.py): each test asserts the exact requests sent and the
objects that result. Then the CLI end to end: audit rows, idempotent apply, one-line credential
errors that leave no applied rows."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import duckdb
import pytest
from gpuledger.enforce.apply import apply_actions
from gpuledger.enforce.backends.base import CredentialError
from gpuledger.enforce.backends.kubernetes import EvictionBackend
from gpuledger.enforce.backends.kueue import KueueBackend
from gpuledger.enforce.model import Action
from typer.testing import CliRunner

from gpuledger import warehouse
from gpuledger.ingest.jobs import k8s_lists
from tests.helpers.configs import TWO_PROJECTS
from tests.helpers.k8s_standin import KubeStandIn

kubernetes = pytest.importorskip("kubernetes")
TOKEN = "s3cret"
WL = "/apis/kueue.x-k8s.io/v1beta2/namespaces/ml/workloads"


def kubeconfig(server: KubeStandIn, path, token: str = TOKEN):
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: s\n  cluster:\n    server: {server.url}\n"
        f"users:\n- name: u\n  user:\n    token: {token}\n"
        "contexts:\n- name: k\n  context:\n    cluster: s\n    user: u\ncurrent-context: k\n")
    return path


@pytest.fixture
def server():
    s = KubeStandIn().start()
    s.token = TOKEN
    yield s
    s.close()


@pytest.fixture
def api(server, tmp_path):
    return kubernetes.config.new_client_from_config(config_file=str(kubeconfig(server, tmp_path / "kc")))


def workload(name: str, *, priority: int = 100, active: bool = True, wpc: str | None = None,
             admitted: bool = True, annotations: dict | None = None) -> dict:
    spec = {"priority": priority, "active": active, "queueName": "lq",
            "podSets": [{"name": "main", "count": 1, "template": {"spec": {"containers": []}}}]}
    if wpc:
        # v1beta2: a reference object (v1beta1's priorityClassName / priorityClassSource are gone)
        spec |= {"priorityClassRef": {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": wpc}}
    status = {"conditions": [{"type": "QuotaReserved", "status": "True" if admitted else "False"}]}
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}", "resourceVersion": "1",
                         "annotations": annotations or {}},
            "spec": spec, "status": status}


def pod(name: str, labels: dict | None = None) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}", "labels": labels or {}},
            "spec": {"containers": [{"name": "main"}]}, "status": {"phase": "Running"}}


def action(kind: str, job_id: str, **kw) -> Action:
    kw.setdefault("source", "kueue" if "/workload/" in job_id else "kubernetes")
    name = job_id.rpartition("/")[2]
    kw.setdefault("namespace", "ml")
    kw.setdefault("name", name)
    if kw["source"] == "kubernetes":  # pod rows: job_id may be the uid, scheduler_job is namespace/pod
        kw.setdefault("scheduler_job", job_id)
    if kind == "preempt":  # what the plan saw (apply re-reads the object and compares)
        kw.setdefault("observed", {"uid": f"uid-{name}"})
    return Action(action=kind, cluster="k", job_id=job_id, project="p", reason=kw.pop("reason", f"{kind} because"),
                  rule="test", action_id=kw.pop("action_id", f"plan:{job_id}:{kind}"), **kw)


def calls(server, method=None):
    return [(c["method"], c["path"], c["query"], c["body"]) for c in server.calls if method in (None, c["method"])]


# --- Kueue ----------------------------------------------------------------------------------------
@pytest.mark.slow
def test_kueue_set_priority_patches_spec_priority_with_reason_and_event(server, api):
    server.kueue_workloads[("ml", "train-a")] = workload("train-a", priority=100)
    out = KueueBackend(api=api, cluster="k").set_priority(action("set-priority", "ml/workload/train-a", priority=503000,
                                                    reason="funded"), dry_run=False)
    assert out.outcome == "done" and "100 -> 503000" in out.detail
    (get, patch, post) = server.calls
    assert (get["method"], get["path"]) == ("GET", f"{WL}/train-a")
    assert (patch["method"], patch["path"], patch["query"]) == ("PATCH", f"{WL}/train-a", {})
    assert patch["content_type"] == "application/merge-patch+json"
    assert patch["body"] == {"spec": {"priority": 503000}, "metadata": {"annotations": {
        "gpuledger.io/priority": "503000", "gpuledger.io/reason": "funded"}}}
    assert (post["method"], post["path"]) == ("POST", "/api/v1/namespaces/ml/events")
    assert post["body"]["involvedObject"] == {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
                                              "name": "train-a", "namespace": "ml", "uid": "uid-train-a"}
    assert post["body"]["reason"] == "GpuledgerPriority" and post["body"]["type"] == "Normal"
    assert post["body"]["message"] == "priority 100 -> 503000: funded"
    stored = server.kueue_workloads[("ml", "train-a")]
    assert stored["spec"]["priority"] == 503000 and stored["spec"]["active"] is True
    assert stored["metadata"]["annotations"]["gpuledger.io/priority"] == "503000"
    assert len(server.events) == 1
    # the same value again: read, nothing written
    server.calls.clear()
    again = KueueBackend(api=api, cluster="k").set_priority(action("set-priority", "ml/workload/train-a", priority=503000),
                                               dry_run=False)
    assert again.outcome == "unchanged" and [c[0] for c in calls(server)] == ["GET"]


def test_kueue_workload_priority_class_is_named(server, api):
    server.kueue_workloads[("ml", "wpc")] = workload("wpc", priority=1000, wpc="research-high")
    out = KueueBackend(api=api, cluster="k").set_priority(action("set-priority", "ml/workload/wpc", priority=103000), dry_run=False)
    assert out.outcome == "done" and "WorkloadPriorityClass research-high" in out.detail
    assert server.kueue_workloads[("ml", "wpc")]["spec"]["priority"] == 103000


def test_kueue_preempt_stop_deactivates_and_requeue_reactivates_after_eviction(server, api):
    server.kueue_workloads[("ml", "idle")] = workload("idle")
    server.kueue_workloads[("ml", "ckpt")] = workload("ckpt")
    backend = KueueBackend(api=api, cluster="k")
    assert backend.preempt(action("preempt", "ml/workload/idle", mode="stop"), dry_run=False).outcome == "done"
    assert backend.preempt(action("preempt", "ml/workload/ckpt", mode="requeue"), dry_run=False).outcome == "done"
    patches = [c[3] for c in calls(server, "PATCH")]
    assert patches == [
        {"spec": {"active": False}, "metadata": {"annotations": {"gpuledger.io/preempted": "preempt because"}}},
        {"spec": {"active": False}, "metadata": {"annotations": {"gpuledger.io/preempted": "preempt because",
                                                                 "gpuledger.io/requeue": "pending"}}}]
    assert [e["reason"] for e in server.events] == ["GpuledgerPreempted", "GpuledgerPreempted"]
    assert all(e["type"] == "Warning" for e in server.events)
    # Kueue has not evicted it yet (quota still reserved): not re-activated
    server.calls.clear()
    assert backend.prepare(dry_run=False) == []
    assert calls(server, "PATCH") == []
    # evicted: the next run re-activates it and clears the mark; the stopped one stays off
    server.kueue_workloads[("ml", "ckpt")]["status"]["conditions"][0]["status"] = "False"
    server.kueue_workloads[("ml", "idle")]["status"]["conditions"][0]["status"] = "False"
    (line,) = backend.prepare(dry_run=False)
    assert line.startswith("re-activated Workload ml/ckpt (requeue); sent:\n    PATCH ")
    assert calls(server, "PATCH") == [("PATCH", f"{WL}/ckpt", {}, {
        "spec": {"active": True}, "metadata": {"annotations": {"gpuledger.io/requeue": None}}})]
    ckpt, idle = server.kueue_workloads[("ml", "ckpt")], server.kueue_workloads[("ml", "idle")]
    assert ckpt["spec"]["active"] is True and "gpuledger.io/requeue" not in ckpt["metadata"]["annotations"]
    assert idle["spec"]["active"] is False
    # already deactivated: nothing written
    server.calls.clear()
    assert backend.preempt(action("preempt", "ml/workload/idle", mode="stop"), dry_run=False).outcome == "unchanged"
    assert calls(server, "PATCH") == []


def test_kueue_warn_annotates_and_emits_a_warning_event(server, api):
    server.kueue_workloads[("ml", "sq")] = workload("sq")
    out = KueueBackend(api=api, cluster="k").warn(action("warn", "ml/workload/sq", stage="warning", reason="idle 70 min"),
                                     dry_run=False)
    assert out.outcome == "done"
    (patch,) = calls(server, "PATCH")
    assert patch[3]["metadata"]["annotations"]["gpuledger.io/warning"] == "warning: idle 70 min"
    assert server.events[0]["reason"] == "GpuledgerIdleWarning" and server.events[0]["type"] == "Warning"


def test_server_side_dry_run_changes_nothing(server, api):
    server.kueue_workloads[("ml", "a")] = workload("a", priority=100)
    server.add_pod(pod("p1"))
    before = json.dumps(list(server.kueue_workloads.values()), sort_keys=True)
    kueue, evict = KueueBackend(api=api, cluster="k", server_dry_run=True), EvictionBackend(api=api, cluster="k", server_dry_run=True)
    assert kueue.set_priority(action("set-priority", "ml/workload/a", priority=5), dry_run=False).outcome \
        == "server-dry-run"
    assert kueue.preempt(action("preempt", "ml/workload/a", mode="stop"), dry_run=False).outcome == "server-dry-run"
    assert evict.preempt(action("preempt", "ml/p1", mode="stop"), dry_run=False).outcome == "server-dry-run"
    writes = [c for c in server.calls if c["method"] != "GET"]
    assert writes and all(c["query"] == {"dryRun": "All"} for c in writes)
    assert json.dumps(list(server.kueue_workloads.values()), sort_keys=True) == before
    assert server.events == [] and [p["metadata"]["name"] for p in server.pods_snapshot()] == ["p1"]


def test_plan_level_dry_run_writes_nothing_and_reads_what_the_real_run_checks(server, api):
    server.kueue_workloads[("ml", "a")] = workload("a")
    run = apply_actions([action("set-priority", "ml/workload/a", priority=5),
                         action("preempt", "ml/workload/a", mode="stop")], KueueBackend(api=api, cluster="k"), dry_run=True)
    assert [o.outcome for _, o in run.results] == ["dry-run", "dry-run"] and run.performed == 0
    # only reads: the list `prepare` scans for workloads to re-activate, the workload read before the
    # priority (is it set already?) and twice before the preemption (still the workload judged? still
    # active?) — exactly the reads the real run makes, so the dry run lists the writes it would send
    assert [(c["method"], c["path"]) for c in server.calls] == [
        ("GET", "/apis/kueue.x-k8s.io/v1beta2/workloads"), ("GET", f"{WL}/a"), ("GET", f"{WL}/a"), ("GET", f"{WL}/a")]
    assert [line.strip().split(" ", 2)[:2] for _, o in run.results for line in o.detail.splitlines()[1:]] == [
        ["PATCH", f"{WL}/a"], ["POST", "/api/v1/namespaces/ml/events"]] * 2


# --- eviction -------------------------------------------------------------------------------------
def test_eviction_honours_pod_disruption_budgets(server, api):
    server.add_pod(pod("free"))
    server.add_pod(pod("guarded-1", {"app": "svc"}))
    server.add_pod(pod("guarded-2", {"app": "svc"}))
    server.pdbs.append({"metadata": {"name": "svc-pdb", "namespace": "ml"},
                        "spec": {"selector": {"matchLabels": {"app": "svc"}}}, "status": {"disruptionsAllowed": 1}})
    plan = [action("preempt", f"ml/{n}", mode="stop") for n in ("free", "guarded-1", "guarded-2")]
    run = apply_actions(plan, EvictionBackend(api=api, cluster="k"), dry_run=False)
    assert [(a.job_id, o.outcome) for a, o in run.results] == [
        ("ml/free", "done"), ("ml/guarded-1", "done"), ("ml/guarded-2", "refused")]
    refused = run.results[2][1]
    assert refused.error.startswith("429 ") and "PodDisruptionBudget allows no disruption" in refused.detail
    evictions = [c for c in server.calls if c["path"].endswith("/eviction")]
    assert [c["path"] for c in evictions] == [f"/api/v1/namespaces/ml/pods/{n}/eviction"
                                              for n in ("free", "guarded-1", "guarded-2")]  # no retry
    assert evictions[0]["body"] == {"apiVersion": "policy/v1", "kind": "Eviction",
                                    "metadata": {"name": "free", "namespace": "ml"},
                                    "deleteOptions": {"preconditions": {"uid": "uid-free"}}}  # the pod's own grace
    assert [p["metadata"]["name"] for p in server.pods_snapshot()] == ["guarded-2"]
    assert server.pdbs[0]["status"]["disruptionsAllowed"] == 0
    assert [e["involvedObject"]["name"] for e in server.events] == ["free", "guarded-1"]
    assert run.performed == 2


def test_eviction_with_two_budgets_is_an_error_naming_the_fix(server, api):
    server.add_pod(pod("x", {"app": "a", "tier": "t"}))
    for name, labels in (("one", {"app": "a"}), ("two", {"tier": "t"})):
        server.pdbs.append({"metadata": {"name": name, "namespace": "ml"},
                            "spec": {"selector": {"matchLabels": labels}}, "status": {"disruptionsAllowed": 5}})
    out = EvictionBackend(api=api, cluster="k").preempt(action("preempt", "ml/x", mode="stop"), dry_run=False)
    assert out.outcome == "error" and "several PodDisruptionBudgets" in out.detail
    assert out.error.startswith("500 ")


def test_pod_priority_cannot_change_so_it_is_skipped(api):
    out = EvictionBackend(api=api, cluster="k").set_priority(action("set-priority", "ml/p", priority=1), dry_run=False)
    assert out.outcome == "skipped" and "--backend kueue" in out.detail


# --- errors ---------------------------------------------------------------------------------------
def test_an_api_error_on_one_action_is_recorded_and_the_others_go_on(server, api):
    for n in ("a", "b", "c"):
        server.kueue_workloads[("ml", n)] = workload(n)
    server.fail_next[("PATCH", f"{WL}/b")] = (409, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                                    "reason": "Conflict", "code": 409,
                                                    "message": "the object has been modified"})
    plan = [action("set-priority", f"ml/workload/{n}", priority=7) for n in ("a", "b", "c")]
    run = apply_actions(plan, KueueBackend(api=api, cluster="k"), dry_run=False)
    assert [o.outcome for _, o in run.results] == ["done", "error", "done"]
    assert run.results[1][1].error == "409 the object has been modified"
    assert [server.kueue_workloads[("ml", n)]["spec"]["priority"] for n in "abc"] == [7, 100, 7]
    assert run.fatal is None and run.performed == 2


@pytest.mark.parametrize("token, forbid, words", [("expired", False, "401 Unauthorized"),
                                                  (TOKEN, True, "403 Forbidden")])
def test_a_refused_credential_stops_the_run_with_one_line(server, tmp_path, token, forbid, words):
    server.kueue_workloads[("ml", "a")] = workload("a")
    server.forbid = forbid
    bad = kubernetes.config.new_client_from_config(config_file=str(kubeconfig(server, tmp_path / "kc", token)))
    plan = [action("set-priority", "ml/workload/a", priority=7), action("preempt", "ml/workload/a", mode="stop")]
    run = apply_actions(plan, KueueBackend(api=bad, cluster="k"), dry_run=False)
    assert isinstance(run.fatal, CredentialError) and run.results == []
    assert words in str(run.fatal) and "\n" not in str(run.fatal)
    assert len(server.calls) == 1  # the first refusal ends it: no second request


def test_already_done_actions_are_not_performed_again(server, api):
    server.kueue_workloads[("ml", "a")] = workload("a")
    a = action("set-priority", "ml/workload/a", priority=7)
    run = apply_actions([a], KueueBackend(api=api, cluster="k"), dry_run=False, already_done={a.action_id})
    assert run.results == [] and run.already_done == [a]
    # only prepare's list of workloads waiting for their requeue
    assert calls(server) == [("GET", "/apis/kueue.x-k8s.io/v1beta2/workloads", {"limit": "500"}, None)]  # read in pages


def test_jobs_of_other_schedulers_are_skipped(api):
    run = apply_actions([action("preempt", "12345", source="slurm", mode="stop")], KueueBackend(api=api, cluster="k"),
                        dry_run=False)
    assert [o.outcome for _, o in run.results] == ["skipped"]


# --- the CLI end to end ---------------------------------------------------------------------------
NOW = datetime(2026, 11, 20, 12, 0)
CONFIG = TWO_PROJECTS  # funded-proj (a November budget) and free-proj, enforcement live


def _cli(*args):
    from gpuledger.cli import app

    return CliRunner().invoke(app, list(args), catch_exceptions=False)


@pytest.fixture
def kueue_warehouse(tmp_path):
    """Two Kueue workloads: a funded one inside its minimum runtime, and an unfunded burst one."""
    path = tmp_path / "w.duckdb"
    (tmp_path / "c.yaml").write_text(CONFIG)
    assert _cli("config", "load", "--config", str(tmp_path / "c.yaml"), "-w", str(path)).exit_code == 0
    rows = [("ml/workload/funded", "funded-proj", "funded", 4 * 3600, 10),
            ("ml/workload/burst", "free-proj", "burst", 0, 10)]
    with warehouse.open_writer(path) as con:
        for job_id, project, name, min_rt, prio in rows:
            con.execute("INSERT INTO jobs (cluster, job_id, project, name, namespace, kind, gpu_model, gpus, "
                        "min_runtime_s, submit_time, start_time, state, priority, source, updated_at) VALUES "
                        "('k', ?, ?, ?, 'ml', 'training', 'H100', 8, ?, ?, ?, 'RUNNING', ?, 'kueue', ?)",
                        [job_id, project, name, min_rt, NOW - timedelta(hours=1), NOW - timedelta(hours=1), prio,
                         NOW])
    return path


def _audit(path, sql="SELECT phase, action, job_id, outcome, dry_run, error FROM enforcement_audit "
                     "WHERE phase = 'applied' ORDER BY job_id, attempt"):
    with duckdb.connect(str(path), read_only=True) as con:
        return con.execute(sql).fetchall()


@pytest.mark.slow
def test_cli_plan_apply_twice_and_explain(server, kueue_warehouse, tmp_path):
    kc = kubeconfig(server, tmp_path / "kc")
    for n in ("funded", "burst"):
        server.kueue_workloads[("ml", n)] = workload(n, priority=10)
    plan_json = tmp_path / "plan.json"
    out = _cli("enforce", "plan", "--format", "json", "--out", str(plan_json), "--now", "2026-11-20T12:00:00",
               "-w", str(kueue_warehouse))
    assert out.exit_code == 0, out.output
    doc = json.loads(plan_json.read_text())
    by = {(a["action"], a["job_id"]): a for a in doc["actions"]}
    # no usage yet, so the fair-share ranks tie; the bands decide: funded 500,000 + …, unfunded 100,000 + …
    funded, burst = by[("set-priority", "ml/workload/funded")], by[("set-priority", "ml/workload/burst")]
    assert funded["priority"] > 500_000 > burst["priority"] > 100_000
    assert funded["funded"] is True and funded["min_runtime_until"] == "2026-11-20T15:00:00Z"
    assert set(doc["actions"][0]) >= {"action", "cluster", "job_id", "project", "reason", "priority", "funded",
                                      "min_runtime_until", "warned_at", "dry_run", "action_id"}
    first = _cli("enforce", "apply", "--plan", str(plan_json), "--backend", "kueue", "--yes",
                 "--kubeconfig", str(kc), "-w", str(kueue_warehouse))
    assert first.exit_code == 0, first.output
    assert "applied: 2 action(s) performed, 0 already done before" in first.output
    assert server.kueue_workloads[("ml", "funded")]["spec"]["priority"] == funded["priority"]
    assert server.kueue_workloads[("ml", "burst")]["spec"]["priority"] == burst["priority"]
    patches = len(calls(server, "PATCH"))
    second = _cli("enforce", "apply", "--plan", str(plan_json), "--backend", "kueue", "--yes",
                  "--kubeconfig", str(kc), "-w", str(kueue_warehouse))
    assert "applied: 0 action(s) performed, 2 already done before" in second.output
    assert len(calls(server, "PATCH")) == patches  # nothing sent twice
    assert _audit(kueue_warehouse) == [("applied", "set-priority", "ml/workload/burst", "done", False, None),
                                       ("applied", "set-priority", "ml/workload/funded", "done", False, None)]
    # the Kueue ingest reads the workloads again (spec.priority is now gpuledger's): the next cycle
    # knows the priority is set -> none, with why
    def ingest_priorities():
        with warehouse.open_writer(kueue_warehouse) as con:
            for (ns, name), wl in server.kueue_workloads.items():
                con.execute("UPDATE jobs SET priority = ? WHERE job_id = ?", [wl["spec"]["priority"],
                                                                              f"{ns}/workload/{name}"])
    ingest_priorities()
    again = _cli("enforce", "plan", "--format", "json", "--now", "2026-11-20T12:05:00", "-w", str(kueue_warehouse))
    assert {a["action"] for a in json.loads(again.output)["actions"]} == {"none"}
    # a WorkloadPriorityClass change makes Kueue rewrite one: gpuledger sets its value again
    server.kueue_workloads[("ml", "burst")]["spec"]["priority"] = 1000
    ingest_priorities()
    drift = _cli("enforce", "plan", "--format", "json", "--now", "2026-11-20T12:10:00", "-w", str(kueue_warehouse))
    (reset,) = [a for a in json.loads(drift.output)["actions"] if a["action"] == "set-priority"]
    assert reset["job_id"] == "ml/workload/burst" and reset["priority"] == burst["priority"]
    assert "Kueue reports 1000 (a WorkloadPriorityClass change rewrote it)" in reset["reason"]
    explained = _cli("enforce", "explain", "ml/workload/funded", "-w", str(kueue_warehouse))
    assert explained.exit_code == 0
    assert f"priority {funded['priority']} already set (funded: above unfunded work" in explained.output
    # every action the job ever had, oldest first: the set-priority of 12:00 and what applying it did
    # (twice: done, then already done — one applied row), then the none of 12:05
    lines = explained.output.splitlines()
    first_plan = next(i for i, ln in enumerate(lines) if "2026-11-20 12:00Z planned set-priority" in ln)
    assert "via kueue: done" in " ".join(lines[first_plan:first_plan + 5])
    assert first_plan < next(i for i, ln in enumerate(lines) if "2026-11-20 12:05Z planned none" in ln)


def test_cli_dry_run_without_yes_calls_nothing(server, kueue_warehouse, tmp_path):
    kc = kubeconfig(server, tmp_path / "kc")
    out = _cli("enforce", "apply", "--backend", "kueue", "--kubeconfig", str(kc), "--now", "2026-11-20T12:00:00",
               "-w", str(kueue_warehouse))
    assert out.exit_code == 0 and "dry run: 0 action(s) performed" in out.output
    # the dry run reads the live view exactly as the real run does, and writes nothing
    assert server.calls and {c["method"] for c in server.calls} == {"GET"}
    assert {r[3] for r in _audit(kueue_warehouse)} <= {"dry-run", "skipped", "refused"}


@pytest.mark.slow
def test_cli_refused_credential_is_one_line_and_writes_no_applied_rows(server, kueue_warehouse, tmp_path):
    import subprocess
    import sys

    kc = kubeconfig(server, tmp_path / "kc", token="expired")
    server.kueue_workloads[("ml", "funded")] = workload("funded")
    done = subprocess.run([sys.executable, "-m", "gpuledger.cli", "enforce", "apply", "--backend", "kueue", "--yes",
                           "--kubeconfig", str(kc), "--now", "2026-11-20T12:00:00", "-w", str(kueue_warehouse)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1
    err = done.stderr.strip().splitlines()
    assert len(err) == 1 and "401 Unauthorized" in err[0] and "refresh the kubeconfig token" in err[0]
    assert "Traceback" not in done.stderr
    assert _audit(kueue_warehouse) == []
    # the live view is read before planning, so the refusal comes first: no plan rows either
    assert _audit(kueue_warehouse, "SELECT count(*) FROM enforcement_audit") == [(0,)]


def test_observe_reads_checkpoint_labels_and_priority(server, api):
    wl = workload("ck", priority=42)
    wl["spec"]["podSets"][0]["template"]["metadata"] = {"labels": {"gpuledger.io/checkpointing": "true"}}
    wl["metadata"]["labels"] = {"team": "a"}
    server.kueue_workloads[("ml", "ck")] = wl
    server.add_pod(pod("p", {"gpuledger.io/checkpointing": "true"}))
    seen = KueueBackend(api=api, cluster="k").observe()
    assert seen == {"ml/workload/ck": {"uid": "uid-ck", "active": True, "state": "QuotaReserved", "phase": "running",
                                       "labels": {"gpuledger.io/checkpointing": "true", "team": "a"},
                                       "annotations": {}, "priority": 42}}
    pods = EvictionBackend(api=api, cluster="k").observe()
    assert pods["ml/p"]["labels"] == {"gpuledger.io/checkpointing": "true"} and pods["uid-p"] == pods["ml/p"]


def test_observe_reads_every_page_of_a_large_workload_list(server, api, monkeypatch):
    # 5 workloads in pages of 2: three GETs (the 2nd and 3rd with the continue token the stand-in
    # gave: "2:<rv>", "4:<rv>"), all five seen
    monkeypatch.setattr(k8s_lists, "PAGE_SIZE", 2)
    for name in "abcde":
        server.kueue_workloads[("ml", name)] = workload(name)
    seen = KueueBackend(api=api, cluster="k").observe()
    assert sorted(seen) == [f"ml/workload/{n}" for n in "abcde"]
    gets = [query for method, path, query, _ in calls(server) if path.endswith("/workloads")]
    assert [q.get("limit") for q in gets] == ["2", "2", "2"]
    assert [q.get("continue", "").split(":")[0] for q in gets] == ["", "2", "4"]


def test_cli_burst_preempted_for_waiting_funded_work_requeued_when_it_checkpoints(server, kueue_warehouse, tmp_path):
    kc = kubeconfig(server, tmp_path / "kc")
    with warehouse.open_writer(kueue_warehouse) as con:  # funded work waiting for 8 H100s
        con.execute("INSERT INTO jobs (cluster, job_id, project, name, namespace, kind, gpu_model, gpus, "
                    "min_runtime_s, submit_time, state, priority, source, updated_at) VALUES ('k', "
                    "'ml/workload/waiting', 'funded-proj', 'waiting', 'ml', 'training', 'H100', 8, 3600, ?, "
                    "'PENDING', 10, 'kueue', ?)", [NOW - timedelta(minutes=5), NOW])  # fresh data: 5 min old
    for n in ("funded", "burst", "waiting"):  # the waiting one holds no quota
        server.kueue_workloads[("ml", n)] = workload(n, priority=10, admitted=n != "waiting")
    server.kueue_workloads[("ml", "burst")]["metadata"]["annotations"] = {"gpuledger.io/checkpointing": "true"}
    blind = _cli("enforce", "plan", "--format", "json", "--no-record", "--now", "2026-11-20T12:00:00",
                 "-w", str(kueue_warehouse))
    # without the live view nothing is preempted, and the plan says so (its mode could be wrong)
    assert "planned without the scheduler's live view" in blind.stderr
    rows = json.loads(blind.stdout)["actions"]
    assert not [a for a in rows if a["action"] == "preempt"]
    (why,) = [a["reason"] for a in rows if a["action"] == "none" and a["job_id"] == "ml/workload/burst"]
    assert "without the scheduler's live view" in why and "nothing is preempted" in why
    seen = json.loads(_cli("enforce", "plan", "--format", "json", "--no-record", "--observe", "kueue",
                           "--kubeconfig", str(kc), "--now", "2026-11-20T12:00:00", "-w", str(kueue_warehouse)).output)
    (pre,) = [a for a in seen["actions"] if a["action"] == "preempt"]
    # the funded running job is inside its minimum runtime: only the unfunded burst job can go
    assert (pre["job_id"], pre["rule"]) == ("ml/workload/burst", "unfunded-burst")
    assert pre["mode"] == "requeue" and "resumes from its checkpoint" in pre["reason"]
    assert pre["observed"]["uid"] == "uid-burst" and pre["observed"]["active"] is True  # what apply re-checks
    assert "waiting for" in pre["reason"] and pre["figures"]["waiting_job"] == "ml/workload/waiting"
    assert calls(server, "PATCH") == []  # planning changes nothing


def test_unusable_kubeconfig_is_a_one_line_credential_error(tmp_path):
    bad = tmp_path / "kc"
    bad.write_text("apiVersion: v1\nkind: Config\nclusters: []\nusers: []\ncontexts: []\n")
    with pytest.raises(CredentialError) as caught:
        KueueBackend(kubeconfig=str(bad)).observe()
    assert "Kubernetes credentials" in str(caught.value) and "\n" not in str(caught.value)
